"""Strict JSON: the one reader for JSON from outside (request bodies, uploaded and host
files, MCP messages). The standard parser, minus what makes a document ambiguous, not JSON
at all, or costly to hold.

`StrictJSONError`, a ValueError whose message is one phrase such as `duplicate key 'a'`,
is raised for:
  - a key given twice in one object (which value wins depends on the reader);
  - the bare constants NaN, Infinity and -Infinity (Python's parser accepts them; JSON
    does not), and a number out of a float's range such as `1e999` (which it reads as
    Infinity by another spelling);
  - a number written with more than `max_number_chars` characters (`MAX_NUMBER_CHARS`):
    Python reads an integer's digits in quadratic time;
  - arrays and objects nested deeper than `max_depth` (`MAX_DEPTH` unless told): the
    standard parser recurses once per level and fails with RecursionError somewhere near
    a thousand, and every reader after it (validation, storage, rendering) walks the
    value recursively too;
  - more than `max_containers` arrays and objects (`MAX_CONTAINERS`) or more than
    `max_values` values (`MAX_VALUES`): the C parser builds them holding the GIL, even in
    a parse thread, so their count, not the text's length, decides how long no other
    thread runs (an object of a million members held it for seconds). A caller whose
    documents are smaller by nature passes lower limits (a knowledge document's body);
  - a text longer than `max_chars` (`MAX_CHARS`), before any of it is parsed.
Syntax errors stay `json.JSONDecodeError`, and bytes that are not UTF-8
`UnicodeDecodeError` (both ValueErrors), so each caller words them its own way. Numbers
are the standard parser's: integers (exact) and finite floats.

The limits are checked on the text before it is parsed, at C speed (`_check_shape`: a
count of quotes, brackets and commas outside strings; nesting by removing innermost pairs,
one level per pass; a number's length as a run of the characters numbers are written
with); duplicate keys as each object is built (`dict` of its pairs, compared by length),
a float's range as it is read. Nothing walks the parsed value in Python. Within the
default limits the values of the costliest document (an object of 50,000 members, numbers
of 100 digits) hold the GIL for tens of milliseconds; what is left is linear in the text's
length, at C speed (a 16 MiB text of escapes: about a tenth of a second on a busy core).
A server parses large texts off its event loop (`webui.parse_threads.run_parse`).
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

# Deep enough for any configuration, schema or tool argument a person writes.
MAX_DEPTH = 64
# Files read from disk; HTTP bodies are smaller still (STEAMHARNESS_MAX_BODY_BYTES), a
# knowledge document's JSON body excepted (STEAMHARNESS_MAX_FILE_BYTES and 1 MiB).
MAX_CHARS = 16 * 1024 * 1024
# More than a configuration or a tool's arguments hold (a table of thousands of rows);
# the C parser takes about a microsecond per value at worst (an object's members), so a
# parse within both holds the GIL for tens of milliseconds on a busy core.
MAX_CONTAINERS = 20_000
MAX_VALUES = 50_000
# Longer than any number a program writes (a double needs 24 characters, a 64-bit
# integer 20); Python reads an integer's digits in quadratic time.
MAX_NUMBER_CHARS = 100

_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_SQUARE = bytes.maketrans(b"{}", b"[]")
# The characters a number is written with as `0`, every other byte a space: a run of
# `0`s is a number (or, outside valid JSON, something the parser refuses anyway).
_NUMBER_CHARS = b"0123456789+-.eE"
_NUMBERS = bytes(ord("0") if b in _NUMBER_CHARS else ord(" ") for b in range(256))


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


def finite_float(text: str) -> float:
    """`parse_float`: a number out of a float's range (`1e999`) is Infinity by another
    spelling; refuse it as the constant is refused."""
    value = float(text)
    if math.isinf(value):
        raise StrictJSONError(f"the number {text} is out of a float's range (at most about 1.8e308)")
    return value


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


def too_many_values(max_values: int) -> StrictJSONError:
    return StrictJSONError(f"the document holds more than {max_values} values")


def _outside_strings(raw: bytes, max_values: int) -> bytes:
    """`raw` with each string's contents and quotes replaced by one quote. In UTF-8 no byte
    of a multi-byte character is a quote, a backslash, a bracket or a comma. A string is a
    value or a key (one per value at most), so past `4 * max_values` quotes the document
    holds too many values: refused before the text is cut into that many pieces."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    if unescaped.count(b'"') > 4 * max_values + 4:
        raise too_many_values(max_values)
    return b'"'.join(unescaped.split(b'"')[::2])


def _number_longer_than(text: bytes, max_number_chars: int) -> bool:
    """Whether `text` holds a run of more than `max_number_chars` number characters."""
    return b"0" * (max_number_chars + 1) in text.translate(_NUMBERS)


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


def _check_shape(
    raw: bytes, *, max_depth: int, max_containers: int, max_values: int, max_number_chars: int
) -> None:
    """The limits on nesting, on the number of values and on a number's length, from the
    text alone."""
    brackets = raw.count(b"[") + raw.count(b"{")
    long_run = len(raw) > max_number_chars and _number_longer_than(raw, max_number_chars)
    if brackets <= min(max_depth, max_containers) and raw.count(b",") < max_values and not long_run:
        return  # too few brackets, commas and digits, strings included, to pass any limit
    structure = _outside_strings(raw, max_values)
    containers = structure.count(b"[") + structure.count(b"{")
    if containers > max_containers:
        # A document that opens deeper than `max_depth` at once is told so, however many it holds.
        head = structure[: 4 * (max_depth + 1)].translate(None, b" \t\r\n:")[: max_depth + 1]
        if len(head) > max_depth and not head.translate(None, b"[{"):
            raise too_deep(max_depth)
        raise StrictJSONError(f"the document holds more than {max_containers} arrays and objects")
    if structure.count(b",") >= max_values:  # n commas separate at least n + 1 values
        raise too_many_values(max_values)
    if long_run and _number_longer_than(structure, max_number_chars):
        raise StrictJSONError(f"a number is written with more than {max_number_chars} characters")
    if containers > max_depth and _deeper_than(structure, max_depth):
        raise too_deep(max_depth)


def loads(
    text: str | bytes,
    *,
    max_depth: int = MAX_DEPTH,
    max_chars: int = MAX_CHARS,
    max_containers: int = MAX_CONTAINERS,
    max_values: int = MAX_VALUES,
    max_number_chars: int = MAX_NUMBER_CHARS,
) -> Any:
    """`json.loads` that raises StrictJSONError for duplicate keys, non-JSON constants and
    numbers out of a float's range, a document nested deeper than `max_depth`, holding more
    than `max_containers` arrays and objects or `max_values` values, a number longer than
    `max_number_chars`, or a text longer than `max_chars`. Bytes must be UTF-8."""
    if len(text) > max_chars:
        raise StrictJSONError(f"the document is longer than {max_chars} characters")
    if isinstance(text, bytes):
        raw, text = text, text.decode("utf-8")
    else:
        raw = text.encode("utf-8", "surrogatepass")
    _check_shape(
        raw,
        max_depth=max_depth,
        max_containers=max_containers,
        max_values=max_values,
        max_number_chars=max_number_chars,
    )
    try:
        return json.loads(
            text,
            object_pairs_hook=object_without_duplicates,
            parse_constant=reject_constant,
            parse_float=finite_float,
        )
    except RecursionError:
        # An unbalanced text nested far past max_depth: the parser ran out of stack first.
        raise too_deep(max_depth) from None
