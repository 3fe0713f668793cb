"""Reading one configuration file strictly: JSON by suffix, else YAML, nothing guessed.

JSON is plain JSON (no comments or trailing commas, which get their own message; no key
given twice; no NaN); YAML is `yaml.safe_load` except that a key given twice in one
mapping is an error. A problem is appended as one line `<path>: <what>`; the caller gets
the parsed data and the SHA-256 digest of the raw bytes (what captures compare).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from webui import strict_json

MAX_FILE_BYTES = 1 << 20

_JSONC_RE = re.compile(r'"(?:[^"\\]|\\.)*"|(?P<bad>//|/\*|,\s*[}\]])', re.DOTALL)


def digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def read(path: Path, problems: list[str]) -> tuple[Any, str] | None:
    """Parse one file (JSON by suffix, else YAML) → (data, digest); None after reporting a problem."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        problems.append(f"{path}: cannot be read ({exc.strerror})")
        return None
    if len(raw) > MAX_FILE_BYTES:
        problems.append(f"{path}: larger than {MAX_FILE_BYTES} bytes; is this a configuration file?")
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        problems.append(f"{path}: not UTF-8 text")
        return None
    try:
        data = _parse_json(text) if path.suffix == ".json" else _parse_yaml(text)
    except ValueError as exc:
        problems.append(f"{path}: {exc}")
        return None
    return data, digest(raw)


def kind(value: Any) -> str:
    """What a parsed value is, in the words a problem uses: `a number`, `a list`, `nothing`…"""
    names = {type(None): "nothing", bool: "a boolean", int: "a number", float: "a number"}
    names |= {str: "a string", list: "a list", dict: "an object"}
    if isinstance(value, datetime.date):
        return "a date"
    return names.get(type(value), type(value).__name__)


def _parse_json(text: str) -> Any:
    try:
        return strict_json.loads(text)
    except json.JSONDecodeError as exc:
        for match in _JSONC_RE.finditer(text):
            if match.group("bad"):
                line = text.count("\n", 0, match.start()) + 1
                raise ValueError(
                    f"line {line}: JSONC comments/trailing commas are not supported (plain JSON only)"
                ) from None
        raise ValueError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load semantics, except that a key given twice in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: list[Any] = []
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.append(key)
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = "; ".join(p for p in (exc.context, exc.problem) if p) or "syntax error"
        raise ValueError(f"invalid YAML{where}: {what}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {str(exc).splitlines()[0]}") from None
