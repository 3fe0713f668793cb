"""Loading a workflow project folder.

`package.json` is a normative, externally written format, so loading is strict about the
fields it knows and silent about the ones it does not (the format may be extended). Every
problem becomes one `ProjectError` line that names the file and the field path, because the
person reading it has to fix the file by hand and has nothing else to go on.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Final

from jsonschema import Draft202012Validator

from webui import strict_json
from webui.errors import ProjectError
from webui.workflows.related import RelatedRef, parse_related_projects

if TYPE_CHECKING:
    from webui.workflows.configuration import ConfigField

PARAM_TYPES: Final = ("string", "positional", "number", "boolean", "checkboxes", "file")
STRING_TYPES: Final = frozenset({"string", "positional", "checkboxes"})
DATE_FORMATS: Final = ("date", "date-time")
WORKFLOW_PROJECT_TYPE: Final = "workflow"

OptionValue = str | int | float | bool

_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_ENTRYPOINT_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FORMAT_CHECKER = Draft202012Validator.FORMAT_CHECKER


@dataclass(frozen=True)
class Option:
    """One static choice of a param; a bare string/number/bool in package.json has no label."""

    value: OptionValue
    label: str | None = None

    @property
    def title(self) -> str:
        """What a person sees for this choice: the label, else the value itself."""
        return self.label if self.label is not None else _display(self.value)


@dataclass(frozen=True)
class Param:
    """A normalized param (entrypoint input or `ctx.ask` field).

    `has_default` exists because `None` cannot tell "no default" from a default we might
    one day allow to be null. `multiple` is always true for `checkboxes`, so consumers only
    ever look at `multiple` to know whether the value is an array.
    """

    name: str
    type: str
    required: bool = False
    default: Any = None
    has_default: bool = False
    description: str | None = None
    title: str | None = None
    options: tuple[Option, ...] = ()
    multiple: bool = False
    format: str | None = None


@dataclass(frozen=True)
class Entrypoint:
    """One callable workflow entry; becomes one MCP tool named `id`."""

    id: str
    title: str
    description: str
    handler: str
    timeout_seconds: float | None
    params: tuple[Param, ...]

    @property
    def handler_file(self) -> str:
        """The handler's file, relative to the project root."""
        return self.handler.rpartition(":")[0]

    @property
    def handler_function(self) -> str:
        """The handler's function name inside `handler_file`."""
        return self.handler.rpartition(":")[2]


@dataclass(frozen=True)
class Project:
    """A loaded, validated workflow project; `root` is absolute."""

    id: str
    name: str
    version: str | None
    description: str
    root: Path
    entrypoints: tuple[Entrypoint, ...]
    # `relatedProjects`: other projects this one may call, each under a local alias.
    related: tuple[RelatedRef, ...] = ()
    config_fields: tuple[ConfigField, ...] = ()

    def entrypoint(self, ep_id: str) -> Entrypoint | None:
        """The entrypoint with this id, or None (tool names map 1:1 to entrypoint ids)."""
        for ep in self.entrypoints:
            if ep.id == ep_id:
                return ep
        return None


# --------------------------------------------------------------------------- helpers


def _display(value: Any) -> str:
    """JSON-ish rendering for messages and titles (`true`, not `True`)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _quote(value: Any) -> str:
    """Short, quoted rendering of a bad value so a huge value cannot flood the error line."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _json_type(value: Any) -> str:
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


def _is_number(value: Any) -> bool:
    """JSON numbers only: Python's bool is an int, but `true` is not a number in JSON."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fail(where: str, field: str, problem: str) -> ProjectError:
    """One-line error `<where><field>: <problem>`, e.g. `<file>: entrypoints[0].params[1]` + `.type`."""
    return ProjectError(f"{where}{field}: {problem}")


def _optional_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    """An optional string field; JSON null counts as absent."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail(where, f".{key}", f"expected a string, got {_json_type(value)}")
    return value


def _optional_bool(obj: dict[str, Any], key: str, where: str) -> bool:
    """An optional boolean flag (absent or null means false)."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _fail(where, f".{key}", f"expected true or false, got {_json_type(value)}")
    return value


# --------------------------------------------------------------------------- params


def parse_params(raw: Any, *, where: str) -> tuple[Param, ...]:
    """Validate and normalize a list of param definitions.

    Shared by entrypoint `params` and `ctx.ask(fields)`, which use the same format. `where`
    prefixes every error (e.g. `/x/package.json: entrypoints[0].params`), so the message
    points at the exact element: `<where>[2].type: ...`.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: expected a list of params, got {_json_type(raw)}")
    params: list[Param] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        param = _parse_param(item, item_where)
        if param.name in seen:
            raise _fail(item_where, ".name", f"duplicate param name {param.name!r}")
        seen.add(param.name)
        params.append(param)
    return tuple(params)


def _parse_param(raw: Any, where: str) -> Param:
    """One param object; field checks run in reading order so the first problem is reported."""
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected a param object, got {_json_type(raw)}")
    name = raw.get("name")
    if name is None:
        raise _fail(where, ".name", "is required")
    if not isinstance(name, str) or not _PARAM_NAME_RE.fullmatch(name):
        raise _fail(
            where,
            ".name",
            f"invalid param name {_quote(name)} (letters, digits and '_', not starting with a digit)",
        )
    ptype = raw.get("type")
    if ptype is None:
        raise _fail(where, ".type", f"is required (expected one of: {', '.join(PARAM_TYPES)})")
    if ptype not in PARAM_TYPES:
        raise _fail(
            where,
            ".type",
            f"unknown param type {_quote(ptype)} (expected one of: {', '.join(PARAM_TYPES)})",
        )
    required = _optional_bool(raw, "required", where)
    multiple = _optional_bool(raw, "multiple", where)
    if ptype == "checkboxes":
        if "multiple" in raw and raw["multiple"] is False:
            raise _fail(where, ".multiple", "checkboxes params are always multiple (remove 'multiple')")
        multiple = True
    description = _optional_str(raw, "description", where)
    title = _parse_title(raw, where)
    fmt = _parse_format(raw, ptype, where)
    options = _parse_options(raw.get("options"), ptype, f"{where}.options")
    has_default = raw.get("default") is not None
    default = raw.get("default")
    if has_default:
        _check_default(default, ptype, multiple, fmt, options, f"{where}.default")
    return Param(
        name=name,
        type=ptype,
        required=required,
        default=default,
        has_default=has_default,
        description=description,
        title=title,
        options=options,
        multiple=multiple,
        format=fmt,
    )


def _parse_title(raw: dict[str, Any], where: str) -> str | None:
    """`title` wins; `label` is accepted as its synonym because forms commonly use it."""
    title = _optional_str(raw, "title", where)
    label = _optional_str(raw, "label", where)
    return title if title is not None else label


def _parse_format(raw: dict[str, Any], ptype: str, where: str) -> str | None:
    """Only date formats exist, and only string-valued params can carry them."""
    fmt = raw.get("format")
    if fmt is None:
        return None
    if fmt not in DATE_FORMATS:
        raise _fail(where, ".format", f"unknown format {_quote(fmt)} (expected one of: date, date-time)")
    if ptype not in ("string", "positional"):
        raise _fail(where, ".format", f"format applies only to string and positional params, not {ptype}")
    return fmt


def _value_checker(ptype: str) -> tuple[Callable[[Any], bool], str]:
    """How to recognise one (non-array) value of a param type, and how to name it."""
    if ptype in STRING_TYPES:
        return (lambda v: isinstance(v, str)), "a string"
    if ptype == "number":
        return _is_number, "a number"
    return (lambda v: isinstance(v, bool)), "true or false"


def _parse_options(raw: Any, ptype: str, where: str) -> tuple[Option, ...]:
    """Static choices: bare values or `{"value", "label"}` objects, typed like the param.

    An empty list means "no static options" rather than "nothing is allowed".
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: expected a list of options, got {_json_type(raw)}")
    if not raw:
        return ()
    if ptype == "file":
        raise ProjectError(f"{where}: file params cannot have options")
    is_valid, expected = _value_checker(ptype)
    options: list[Option] = []
    seen: set[tuple[bool, Any]] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        value: Any
        label: str | None = None
        if isinstance(item, dict):
            if item.get("value") is None:
                raise ProjectError(f"{item_where}.value: is required")
            value = item["value"]
            label = _optional_str(item, "label", item_where)
            value_where = f"{item_where}.value"
        else:
            value = item
            value_where = item_where
        if not is_valid(value):
            raise ProjectError(
                f"{value_where}: option {_quote(value)} is not {expected} (param type {ptype})"
            )
        key = (isinstance(value, bool), value)
        if key in seen:
            raise ProjectError(f"{value_where}: duplicate option {_quote(value)}")
        seen.add(key)
        options.append(Option(value=value, label=label))
    return tuple(options)


def _check_default(
    default: Any, ptype: str, multiple: bool, fmt: str | None, options: tuple[Option, ...], where: str
) -> None:
    """A default must itself be a valid argument, or the tool would reject its own default."""
    if ptype == "file":
        raise ProjectError(f"{where}: file params cannot have a default")
    if multiple:
        if not isinstance(default, list):
            raise ProjectError(f"{where}: expected an array for a multiple param, got {_json_type(default)}")
        for index, item in enumerate(default):
            _check_one_default(item, ptype, fmt, options, f"{where}[{index}]")
    else:
        _check_one_default(default, ptype, fmt, options, where)


def _check_one_default(
    value: Any, ptype: str, fmt: str | None, options: tuple[Option, ...], where: str
) -> None:
    """Type, date format and option membership of one default value."""
    is_valid, expected = _value_checker(ptype)
    if not is_valid(value):
        raise ProjectError(f"{where}: {_quote(value)} is not {expected} (param type {ptype})")
    if fmt is not None and not _FORMAT_CHECKER.conforms(value, fmt):
        raise ProjectError(f"{where}: {_quote(value)} is not a valid {fmt}")
    if options and not any(
        isinstance(o.value, bool) == isinstance(value, bool) and o.value == value for o in options
    ):
        allowed = ", ".join(_quote(o.value) for o in options)
        raise ProjectError(f"{where}: {_quote(value)} is not one of the options ({allowed})")


# --------------------------------------------------------------------------- entrypoints


def _parse_entrypoints(raw: Any, root: Path, file: str) -> tuple[Entrypoint, ...]:
    """The non-empty entrypoint list; ids become MCP tool names so they must be unique."""
    where = f"{file}: entrypoints"
    if raw is None:
        raise ProjectError(f"{where}: is required (a non-empty list of entrypoints)")
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: expected a list of entrypoints, got {_json_type(raw)}")
    if not raw:
        raise ProjectError(f"{where}: must list at least one entrypoint")
    entrypoints: list[Entrypoint] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        ep = _parse_entrypoint(item, root, item_where)
        if ep.id in seen:
            raise ProjectError(f"{item_where}.id: duplicate entrypoint id {ep.id!r}")
        seen.add(ep.id)
        entrypoints.append(ep)
    return tuple(entrypoints)


def _parse_entrypoint(raw: Any, root: Path, where: str) -> Entrypoint:
    """One entrypoint; title and description fall back so MCP always has both."""
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected an entrypoint object, got {_json_type(raw)}")
    ep_id = raw.get("id")
    if ep_id is None:
        raise ProjectError(f"{where}.id: is required")
    if not isinstance(ep_id, str) or not _ENTRYPOINT_ID_RE.fullmatch(ep_id):
        raise ProjectError(
            f"{where}.id: invalid entrypoint id {_quote(ep_id)} "
            "(it is the MCP tool name: 1-64 of A-Z a-z 0-9 _ . -)"
        )
    title = _optional_str(raw, "title", where) or ep_id
    description = _optional_str(raw, "description", where) or title
    handler = _parse_handler(raw.get("handler"), root, f"{where}.handler")
    timeout = _parse_timeout(raw.get("timeoutSeconds"), f"{where}.timeoutSeconds")
    params = parse_params(raw.get("params"), where=f"{where}.params")
    return Entrypoint(
        id=ep_id,
        title=title,
        description=description,
        handler=handler,
        timeout_seconds=timeout,
        params=params,
    )


def _parse_handler(raw: Any, root: Path, where: str) -> str:
    """`"relative/file.py:function"`, confined to the project folder.

    The worker imports this file with the project as working directory, so a path that
    escapes the folder (absolute, `..`, symlink out) would run code the project does not own.
    """
    if raw is None:
        raise ProjectError(f'{where}: is required ("file.py:function")')
    if not isinstance(raw, str):
        raise ProjectError(f'{where}: expected a string "file.py:function", got {_json_type(raw)}')
    file_part, sep, function = raw.rpartition(":")
    if not sep or not file_part:
        raise ProjectError(f'{where}: {_quote(raw)} is not of the form "file.py:function"')
    if not function.isidentifier() or keyword.iskeyword(function):
        raise ProjectError(f"{where}: {_quote(function)} is not a valid Python function name")
    if (
        PurePosixPath(file_part).is_absolute()
        or PureWindowsPath(file_part).is_absolute()
        or (file_part.startswith("\\"))
    ):
        raise ProjectError(f"{where}: handler file {_quote(file_part)} must be relative to the project")
    if ".." in PurePosixPath(file_part.replace("\\", "/")).parts:
        raise ProjectError(
            f"{where}: handler file {_quote(file_part)} must stay inside the project (no '..')"
        )
    if not file_part.endswith(".py"):
        raise ProjectError(f"{where}: handler file {_quote(file_part)} must be a .py file")
    path = (root / file_part).resolve()
    if not path.is_relative_to(root):
        raise ProjectError(f"{where}: handler file {_quote(file_part)} resolves outside the project")
    if not path.is_file():
        raise ProjectError(f"{where}: handler file {_quote(file_part)} does not exist in {root}")
    return raw


def _parse_timeout(raw: Any, where: str) -> float | None:
    """Optional positive number of seconds; null means no entrypoint-specific limit."""
    if raw is None:
        return None
    if not _is_number(raw) or raw <= 0:
        raise ProjectError(f"{where}: expected a positive number of seconds, got {_quote(raw)}")
    return raw  # int stays int, so the structure report echoes what the author wrote


# --------------------------------------------------------------------------- project


def _read_package_json(root: Path) -> tuple[Path, dict[str, Any]]:
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
        raise ProjectError(f"{path}: expected a JSON object, got {_json_type(data)}")
    return path, data


def _parse_project_type(data: dict[str, Any], where: str) -> None:
    """Only workflow projects are served; conversation/kanban ones must never leak out."""
    ptype = data.get("projectType")
    if ptype == WORKFLOW_PROJECT_TYPE:
        return
    shown = "missing" if ptype is None else _quote(ptype)
    raise ProjectError(
        f'{where}: projectType: {shown} — not a workflow project (expected "workflow"), '
        "so it is never exposed over MCP"
    )


def _parse_id(raw: Any, where: str) -> str:
    """The immutable project UUID, canonical hyphenated form, stored lowercase.

    Only the 8-4-4-4-12 spelling is accepted: the id appears in URLs, server names and
    CLI arguments, and one project must not be reachable under several spellings.
    """
    if raw is None:
        raise ProjectError(f"{where}: id: is required (a UUID)")
    if not isinstance(raw, str) or not _UUID_RE.fullmatch(raw):
        raise ProjectError(f"{where}: id: {_quote(raw)} is not a UUID")
    return raw.lower()


def load_project(root: Path | str) -> Project:
    """Load and validate a workflow project folder, or raise one clear `ProjectError` line."""
    folder = Path(root).resolve()
    path, data = _read_package_json(folder)
    where = str(path)
    _parse_project_type(data, where)
    project_id = _parse_id(data.get("id"), where)
    name = data.get("name")
    if name is None:
        raise ProjectError(f"{where}: name: is required")
    if not isinstance(name, str) or not name.strip():
        raise ProjectError(f"{where}: name: expected a non-empty string, got {_quote(name)}")
    version = _top_level_str(data, "version", where)
    description = _top_level_str(data, "description", where) or ""
    entrypoints = _parse_entrypoints(data.get("entrypoints"), folder, where)
    # configuration.py builds on this module's field helpers, hence the late import.
    from webui.workflows.configuration import parse_config_fields

    related = parse_related_projects(data.get("relatedProjects"), f"{where}: relatedProjects", project_id)
    return Project(
        id=project_id,
        name=name,
        version=version,
        description=description,
        root=folder,
        entrypoints=entrypoints,
        related=related,
        config_fields=parse_config_fields(data, where),
    )


def _top_level_str(data: dict[str, Any], key: str, where: str) -> str | None:
    """Optional top-level string, reported as `<file>: <key>: ...`."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProjectError(f"{where}: {key}: expected a string, got {_json_type(value)}")
    return value


# --------------------------------------------------------------------------- structure report


def param_report(param: Param) -> dict[str, Any]:
    """A param as plain JSON, the same shape for every param so clients need no guessing."""
    doc: dict[str, Any] = {
        "name": param.name,
        "type": param.type,
        "required": param.required,
        "multiple": param.multiple,
        "title": param.title,
        "description": param.description,
        "format": param.format,
        "options": [{"value": o.value, "label": o.label} for o in param.options],
    }
    if param.has_default:
        doc["default"] = param.default
    return doc


def structure_report(project: Project) -> dict[str, Any]:
    """The structure report: what MCP catalogs are built from."""
    return {
        "id": project.id,
        "name": project.name,
        "version": project.version,
        "projectType": WORKFLOW_PROJECT_TYPE,
        "description": project.description,
        "entrypoints": [
            {
                "id": ep.id,
                "title": ep.title,
                "description": ep.description,
                "timeoutSeconds": ep.timeout_seconds,
                "params": [param_report(p) for p in ep.params],
            }
            for ep in project.entrypoints
        ],
    }
