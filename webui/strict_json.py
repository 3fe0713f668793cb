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
  - a text longer than `max_chars` (`MAX_CHARS`), before any of it is parsed.
Syntax errors stay `json.JSONDecodeError`, and bytes that are not UTF-8
`UnicodeDecodeError` (both ValueErrors), so each caller words them its own way.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

# Deep enough for any configuration, schema or tool argument a person writes.
MAX_DEPTH = 64
# Files read from disk; HTTP bodies are smaller still (STEAMHARNESS_MAX_BODY_BYTES).
MAX_CHARS = 16 * 1024 * 1024


class StrictJSONError(ValueError):
    """Well-formed text that is still not acceptable JSON (a duplicate key, NaN…)."""


def object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook`: JSON with a key twice is ambiguous, so refuse it."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"duplicate key {key!r}")
        result[key] = value
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


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> Any:
    """`json.loads` that raises StrictJSONError for duplicate keys, non-JSON constants, a
    document nested deeper than `max_depth` or longer than `max_chars`. Bytes must be UTF-8."""
    if len(text) > max_chars:
        raise StrictJSONError(f"the document is longer than {max_chars} characters")
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        value = json.loads(text, object_pairs_hook=object_without_duplicates, parse_constant=reject_constant)
    except RecursionError:
        # Far past max_depth: the parser ran out of stack before it finished.
        raise too_deep(max_depth) from None
    if depth(value) > max_depth:
        raise too_deep(max_depth)
    return value
