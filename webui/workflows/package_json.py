"""Reading `package.json` and the field checks every part of it shares.

`package.json` is a normative, externally written format, so loading is strict about the
fields it knows and silent about the ones it does not (the format may be extended). Every
problem becomes one `ProjectError` line that names the file and the field path, because the
person reading it has to fix the file by hand and has nothing else to go on. The params
(`params.py`), the project (`project.py`) and the configuration fields
(`configuration.py`) all build on these helpers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from webui import strict_json
from webui.errors import ProjectError

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def quote(value: Any) -> str:
    """Short, quoted rendering of a bad value so a huge value cannot flood the error line."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for 'expected X, got Y' messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_number(value: Any) -> bool:
    """JSON numbers only: Python's bool is an int, but `true` is not a number in JSON."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def parse_named(raw: list[Any], where: str, parse: Callable[[Any, str], N], what: str) -> tuple[N, ...]:
    """Each item of a list parsed in order (`<where>[i]` in its errors), their names unique."""
    items: list[N] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        parsed = parse(item, item_where)
        if parsed.name in seen:
            raise fail(item_where, ".name", f"duplicate {what} name {parsed.name!r}")
        seen.add(parsed.name)
        items.append(parsed)
    return tuple(items)


def fail(where: str, field: str, problem: str) -> ProjectError:
    """One-line error `<where><field>: <problem>`, e.g. `<file>: entrypoints[0].params[1]` + `.type`."""
    return ProjectError(f"{where}{field}: {problem}")


def optional_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    """An optional string field; JSON null counts as absent."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise fail(where, f".{key}", f"expected a string, got {json_type(value)}")
    return value


def optional_bool(obj: dict[str, Any], key: str, where: str) -> bool:
    """An optional boolean flag (absent or null means false)."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise fail(where, f".{key}", f"expected true or false, got {json_type(value)}")
    return value


def read_package_json(root: Path) -> tuple[Path, dict[str, Any]]:
    """The parsed `package.json` object; a missing file means this is not a workflow project."""
    if not root.exists():
        raise ProjectError(f"{root}: project folder does not exist")
    if not root.is_dir():
        raise ProjectError(f"{root}: not a folder")
    path = root / "package.json"
    if not path.is_file():
        raise ProjectError(
            f"{root}: no package.json — not a workflow project, so it is never exposed over MCP"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProjectError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ProjectError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        data = strict_json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProjectError(
            f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise ProjectError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProjectError(f"{path}: expected a JSON object, got {json_type(data)}")
    return path, data


def parse_id(raw: Any, where: str) -> str:
    """The immutable project UUID, canonical hyphenated form, stored lowercase.

    Only the 8-4-4-4-12 spelling is accepted: the id appears in URLs, server names and
    CLI arguments, and one project must not be reachable under several spellings.
    """
    if raw is None:
        raise ProjectError(f"{where}: id: is required (a UUID)")
    if not isinstance(raw, str) or not UUID_RE.fullmatch(raw):
        raise ProjectError(f"{where}: id: {quote(raw)} is not a UUID")
    return raw.lower()
