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
from dataclasses import dataclass
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


class NotAProject(ProjectError):
    """The folder is no workflow project at all (missing, no package.json, another
    projectType): nothing of it is ever served, not even its problems."""


def read_package_json(root: Path) -> tuple[Path, dict[str, Any]]:
    """The parsed `package.json` object; a missing file means this is not a workflow project."""
    if not root.exists():
        raise NotAProject(f"{root}: project folder does not exist")
    if not root.is_dir():
        raise NotAProject(f"{root}: not a folder")
    path = root / "package.json"
    if not path.is_file():
        raise NotAProject(
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


# --------------------------------------------------------------------------- lines

# A JSON text's tokens that say where a value is: strings (whole, so their brackets are not
# read as structure), the structural characters and line breaks (a valid text has none
# inside a string). Numbers and literals are skipped: no pointer needs their line.
_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\]:,\n]')
# The field path a problem's message starts with, after its file (`entrypoints[0].handler`).
_FIELD_PATH = re.compile(r"[A-Za-z_]\w*(?:\[\d+\]|\.[A-Za-z_]\w*)*")
_STEP = re.compile(r"\[(\d+)\]|\.?([A-Za-z_]\w*)")
Pointer = tuple[str | int, ...]


@dataclass
class _Frame:
    is_object: bool
    expecting_key: bool = True  # an object's next string is a key
    index: int = 0  # an array's next element
    on_path: bool = False  # its current member or element is on the path


def value_lines(text: str, depth: int = 6) -> dict[Pointer, int]:
    """The line (1-based) each member and element up to `depth` levels down starts on: its
    key's for a member, its first token's for an element (a number's or a literal's is not
    known). One linear pass over a text the strict reader took."""
    lines: dict[Pointer, int] = {}
    line = 1
    path: list[str | int] = []
    frames: list[_Frame] = []

    def enter(step: str | int) -> None:
        path.append(step)
        frames[-1].on_path = True
        if len(path) <= depth:
            lines.setdefault(tuple(path), line)

    def leave() -> None:
        if frames and frames[-1].on_path:
            path.pop()
            frames[-1].on_path = False

    def value_starts() -> None:
        if frames and not frames[-1].is_object and not frames[-1].on_path:
            enter(frames[-1].index)

    for token in _TOKENS.finditer(text):
        tok = token.group()
        if tok == "\n":
            line += 1
        elif tok in ("{", "["):
            value_starts()
            frames.append(_Frame(is_object=tok == "{"))
        elif tok in ("}", "]"):
            leave()
            if frames:
                frames.pop()
        elif tok == ",":
            leave()
            if frames:
                frames[-1].expecting_key = True
                frames[-1].index += 1
        elif tok == ":":
            continue
        elif frames and frames[-1].is_object and frames[-1].expecting_key:
            frames[-1].expecting_key = False
            try:
                key = json.loads(tok)
            except ValueError:
                key = tok
            enter(key if isinstance(key, str) else tok)
        else:
            value_starts()
    return lines


def problem_line(message: str, file: str, lines: dict[Pointer, int]) -> int | None:
    """The line of `file` a problem's message (`<file>: <field path>: ...`) is about: the
    deepest part of its field path that `lines` knows."""
    if not message.startswith(f"{file}: "):
        return None
    found = _FIELD_PATH.match(message, len(file) + 2)
    if found is None:
        return None
    pointer: list[str | int] = []
    best = None
    for step in _STEP.finditer(found.group()):
        pointer.append(int(step.group(1)) if step.group(1) is not None else step.group(2))
        best = lines.get(tuple(pointer), best)
    return best
