"""Strict JSON: the one reader for JSON from outside (request bodies, uploaded and host
files, MCP messages). The standard parser, minus what makes a document ambiguous, not JSON
at all, or costly to hold.

`StrictJSONError`, a ValueError whose message is one phrase such as `duplicate key 'a'`,
is raised for:
  - a key given twice in one object (which value wins depends on the reader);
  - the bare constants NaN, Infinity and -Infinity (Python's parser accepts them; JSON
    does not);
  - arrays and objects nested deeper than `max_depth` (`MAX_DEPTH` unless told): the
    standard parser recurses once per level and fails with RecursionError somewhere near
    a thousand, and every reader after it (validation, storage, rendering) walks the
    value recursively too;
  - more than `max_containers` arrays and objects (`MAX_CONTAINERS`) or more than
    `max_values` values (`MAX_VALUES`): the C parser builds them holding the GIL, so
    their count, not the text's length, decides how long no other thread runs (an array
    of 1 MiB of `[]` is 350,000 lists);
  - a text longer than `max_chars` (`MAX_CHARS`), before any of it is parsed.
Syntax errors stay `json.JSONDecodeError`, and bytes that are not UTF-8
`UnicodeDecodeError` (both ValueErrors), so each caller words them its own way. Numbers
are the standard parser's (integers of any length up to Python's digit limit, floats).

The limits are checked on the text before it is parsed, at C speed (`_check_shape`: a
count of brackets and commas outside strings; nesting by removing innermost pairs, one
level per pass); duplicate keys as each object is built (`dict` of its pairs, compared by
length). Nothing walks the parsed value in Python. A server parses large texts off its
event loop (`webui.parse_threads.run_parse`).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

# Deep enough for any configuration, schema or tool argument a person writes.
MAX_DEPTH = 64
# Files read from disk; HTTP bodies are smaller still (STEAMHARNESS_MAX_BODY_BYTES), a
# knowledge document's JSON body excepted (STEAMHARNESS_MAX_FILE_BYTES and 1 MiB).
MAX_CHARS = 16 * 1024 * 1024
# Far more than a configuration, a tool's arguments or a document's metadata hold; a
# parse within both takes a fraction of a second on a busy core.
MAX_CONTAINERS = 100_000
MAX_VALUES = 1_000_000

_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_SQUARE = bytes.maketrans(b"{}", b"[]")


class StrictJSONError(ValueError):
    """Well-formed text that is still not acceptable JSON (a duplicate key, NaN…)."""


def object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook`: JSON with a key twice is ambiguous, so refuse it."""
    result = dict(pairs)
    if len(result) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate key {key!r}")
            seen.add(key)
    return result


def reject_constant(name: str) -> NoReturn:
    """`parse_constant`: NaN and Infinity are not JSON."""
    raise StrictJSONError(f"{name} is not valid JSON")


def too_deep(max_depth: int) -> StrictJSONError:
    return StrictJSONError(f"arrays and objects are nested deeper than {max_depth} levels")


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        stack.extend((child, level) for child in children)
    return deepest


def _outside_strings(raw: bytes) -> bytes:
    """`raw` without its strings' contents: what is left between the quotes. In UTF-8 no
    byte of a multi-byte character is a quote, a backslash, a bracket or a comma."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(unescaped.split(b'"')[::2])


def _deeper_than(structure: bytes, max_depth: int) -> bool:
    """Whether the brackets of `structure` (strings removed) nest deeper than `max_depth`:
    each pass removes the innermost pairs, one level everywhere."""
    pairs = structure.translate(None, _NOT_BRACKETS).translate(_SQUARE)
    for _ in range(max_depth):
        inner = pairs.replace(b"[]", b"")
        if len(inner) == len(pairs):
            return False  # unbalanced: the parser says what is wrong
        pairs = inner
    return b"[]" in pairs


def _check_shape(raw: bytes, *, max_depth: int, max_containers: int, max_values: int) -> None:
    """The limits on nesting and on the number of values, from the text alone."""
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= min(max_depth, max_containers) and raw.count(b",") < max_values:
        return  # too few brackets and commas, strings included, to pass any limit
    structure = _outside_strings(raw)
    containers = structure.count(b"[") + structure.count(b"{")
    if containers > max_containers:
        raise StrictJSONError(f"the document holds more than {max_containers} arrays and objects")
    if structure.count(b",") >= max_values:  # n commas separate at least n + 1 values
        raise StrictJSONError(f"the document holds more than {max_values} values")
    if containers > max_depth and _deeper_than(structure, max_depth):
        raise too_deep(max_depth)


def loads(
    text: str | bytes,
    *,
    max_depth: int = MAX_DEPTH,
    max_chars: int = MAX_CHARS,
    max_containers: int = MAX_CONTAINERS,
    max_values: int = MAX_VALUES,
) -> Any:
    """`json.loads` that raises StrictJSONError for duplicate keys, non-JSON constants, a
    document nested deeper than `max_depth`, holding more than `max_containers` arrays and
    objects or `max_values` values, or longer than `max_chars`. Bytes must be UTF-8."""
    if len(text) > max_chars:
        raise StrictJSONError(f"the document is longer than {max_chars} characters")
    if isinstance(text, bytes):
        raw, text = text, text.decode("utf-8")
    else:
        raw = text.encode("utf-8", "surrogatepass")
    _check_shape(raw, max_depth=max_depth, max_containers=max_containers, max_values=max_values)
    try:
        return json.loads(text, object_pairs_hook=object_without_duplicates, parse_constant=reject_constant)
    except RecursionError:
        # An unbalanced text nested far past max_depth: the parser ran out of stack first.
        raise too_deep(max_depth) from None
