"""Strict JSON: the standard parser, minus what makes a document ambiguous or not JSON at all.

A key given twice in one object (which value wins depends on the reader) and the bare
constants NaN, Infinity and -Infinity (Python's parser accepts them; JSON does not) raise
`StrictJSONError`, a ValueError whose message is one phrase such as `duplicate key 'a'`.
Syntax errors stay `json.JSONDecodeError`, so each caller words them its own way.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn


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


def loads(text: str) -> Any:
    """`json.loads` that raises StrictJSONError for duplicate keys and non-JSON constants."""
    return json.loads(text, object_pairs_hook=object_without_duplicates, parse_constant=reject_constant)
