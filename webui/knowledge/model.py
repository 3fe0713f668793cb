"""What the knowledge base accepts and returns: names, ids, metadata, filters, caps, and the
views every transport shows (JSON-ready dicts)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from webui.errors import KnowledgeRefused

NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DOC_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")
MAX_TITLE_CHARS: Final = 300
MAX_META_BYTES: Final = 8 * 1024
MAX_META_DEPTH: Final = 4
MAX_META_KEYS: Final = 64
MAX_FILTER_KEYS: Final = 8
MAX_FILTER_VALUES: Final = 32
MAX_SEARCH_LIMIT: Final = 50
MAX_PAGE: Final = 200
# The JSON the knowledge routes read (a document's body, an import's line, a metadata or
# filter field): its metadata is at most MAX_META_BYTES, so no valid one comes near these;
# they bound the values of a 16 MiB body to milliseconds of parsing (webui.strict_json).
MAX_JSON_VALUES: Final = 10_000
MAX_JSON_CONTAINERS: Final = 5_000
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Limits:
    """Caps per project (0: none), and what one document or file may be."""

    max_documents: int = 100_000
    max_bytes: int = 1024**3
    max_chunks: int = 1_000_000
    max_collections: int = 100
    max_document_bytes: int = 8 * 1024 * 1024  # a document's text
    max_file_bytes: int = 32 * 1024 * 1024  # a file to extract it from


@dataclass(frozen=True)
class Actor:
    """Who writes, for the audit log."""

    actor: str
    source: str  # api | ui | cli | run
    client_address: str | None = None
    user_agent: str | None = None
    run_id: str | None = None


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise KnowledgeRefused(
            f"invalid collection name {_quoted(name)}"
            " (1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit)"
        )
    return name


def check_doc_id(doc_id: Any) -> str:
    if not isinstance(doc_id, str) or not DOC_ID_RE.fullmatch(doc_id):
        raise KnowledgeRefused(
            f"invalid document id {_quoted(doc_id)}"
            " (1-128 of A-Z a-z 0-9 _ . : @ -, starting with a letter or digit)"
        )
    return doc_id


def check_title(title: Any, fallback: str) -> str:
    if title is None or title == "":
        return fallback[:MAX_TITLE_CHARS]
    if not isinstance(title, str):
        raise KnowledgeRefused("the title must be a string")
    if len(title) > MAX_TITLE_CHARS:
        raise KnowledgeRefused(f"the title is longer than {MAX_TITLE_CHARS} characters")
    return title


def _quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def check_metadata(meta: Any) -> dict[str, Any]:
    """A JSON object of at most MAX_META_KEYS keys, MAX_META_DEPTH levels, MAX_META_BYTES."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise KnowledgeRefused("metadata must be a JSON object")
    _check_depth(meta, 1)
    try:
        size = len(canonical(meta).encode())
    except (TypeError, ValueError):
        raise KnowledgeRefused(
            "metadata must be JSON (strings, numbers, booleans, null, lists, objects)"
        ) from None
    if size > MAX_META_BYTES:
        raise KnowledgeRefused(f"metadata is larger than {MAX_META_BYTES} bytes as JSON")
    return meta


def _check_depth(value: Any, depth: int) -> None:
    if depth > MAX_META_DEPTH:
        raise KnowledgeRefused(f"metadata is nested deeper than {MAX_META_DEPTH} levels")
    if isinstance(value, dict):
        if len(value) > MAX_META_KEYS:
            raise KnowledgeRefused(f"a metadata object has more than {MAX_META_KEYS} keys")
        for key, item in value.items():
            if not isinstance(key, str) or not key or len(key) > 64:
                raise KnowledgeRefused("metadata keys must be strings of 1-64 characters")
            _check_depth(item, depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_META_KEYS:
            raise KnowledgeRefused(f"a metadata list has more than {MAX_META_KEYS} items")
        for item in value:
            _check_depth(item, depth + 1)
    elif isinstance(value, float) and value != value:  # NaN is no JSON
        raise KnowledgeRefused("metadata numbers must be finite")


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def meta_pairs(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The filterable rows of metadata: each top-level scalar, and each scalar of a top-level
    list, as (key, canonical JSON)."""
    pairs: set[tuple[str, str]] = set()
    for key, value in meta.items():
        if _is_scalar(value):
            pairs.add((key, canonical(value)))
        elif isinstance(value, list):
            pairs.update((key, canonical(item)) for item in value if _is_scalar(item))
    return sorted(pairs)


def parse_filter(raw: Any) -> list[tuple[str, list[str]]]:
    """`{"key": value}`: documents whose metadata `key` is `value` (or is a list holding it);
    `{"key": [a, b]}`: any of them. Every key must match."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise KnowledgeRefused('a filter is a JSON object: {"key": value} or {"key": [value, ...]}')
    if len(raw) > MAX_FILTER_KEYS:
        raise KnowledgeRefused(f"a filter names at most {MAX_FILTER_KEYS} keys")
    out: list[tuple[str, list[str]]] = []
    for key, value in raw.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise KnowledgeRefused("filter keys must be strings of 1-64 characters")
        values = value if isinstance(value, list) else [value]
        if not values or len(values) > MAX_FILTER_VALUES:
            raise KnowledgeRefused(f"filter {key!r}: give 1-{MAX_FILTER_VALUES} values")
        if not all(_is_scalar(v) for v in values):
            raise KnowledgeRefused(f"filter {key!r}: values must be strings, numbers, booleans or null")
        out.append((key, sorted({canonical(v) for v in values})))
    return out


def check_limit(limit: Any, default: int, cap: int) -> int:
    if limit is None:
        return default
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= cap:
        raise KnowledgeRefused(f"limit must be an integer from 1 to {cap}")
    return limit
