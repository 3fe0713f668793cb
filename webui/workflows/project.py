"""Loading a workflow project folder: its entrypoints, related projects and configuration
fields, and the structure report MCP catalogs are built from.

The file format and its error style are described in `package_json.py`.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Final, TypeVar

from webui.errors import ProjectError, ProjectProblems
from webui.workflows.configuration import ConfigField, parse_config_fields
from webui.workflows.handlers import CheckBounds, HandlerRef, check_handlers
from webui.workflows.json_schema import check_input_schema
from webui.workflows.package_json import (
    NotAProject,
    Pointer,
    is_number,
    json_type,
    optional_str,
    parse_id,
    problem_line,
    quote,
    read_package_json,
    value_lines,
)
from webui.workflows.params import Param, param_report, parse_params
from webui.workflows.related import RelatedRef, parse_related_projects

WORKFLOW_PROJECT_TYPE: Final = "workflow"
_ENTRYPOINT_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
TASK_MODES: Final = ("never", "optional", "required")
TASK_DEFAULT: Final = "optional"
RESULT_TEXTS: Final = ("json", "output")
# The client capabilities an entrypoint may require (`"requires"`): a call from a client that
# did not declare one of them is refused before any run (webui.mcp.capabilities).
CLIENT_CAPABILITIES: Final = ("sampling", "elicitation", "roots")
T = TypeVar("T")


@dataclass(frozen=True)
class Entrypoint:
    """One callable workflow entry; becomes one MCP tool named `id`."""

    id: str
    title: str
    description: str
    handler: str
    timeout_seconds: float | None
    params: tuple[Param, ...]
    # `"knowledge": "write"`: its handler may add and remove knowledge-base documents
    # (`ctx.knowledge.add/remove`); by default it only reads them.
    knowledge_write: bool = False
    # `"task"`: whether a call may become an MCP task (the tasks extension): "never",
    # "optional" (a client that declares tasks gets one when the run does not end quickly
    # or reports progress) or "required" (only clients that declare tasks may call it).
    task: str = TASK_DEFAULT
    # `"resultText"`: what the result's text content is: "json" (the whole result as JSON,
    # the default) or "output" (a string output itself; structuredContent is unchanged).
    result_text: str = "json"
    # `"inputSchema"` instead of `params`: the tool's own JSON Schema 2020-12, as the JSON
    # text tools/list serves (checked at load: `json_schema.check_input_schema`). Such an
    # entrypoint has no params, so no file params either.
    input_schema: str | None = None
    # `"requires"`: the client capabilities a caller must declare ("sampling", "elicitation",
    # "roots"), in the order written, each once. Empty: any client may call it.
    requires: tuple[str, ...] = ()

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


# --------------------------------------------------------------------------- entrypoints


def _parse_entrypoints(raw: Any, root: Path, file: str, problems: list[str]) -> tuple[Entrypoint, ...]:
    """The entrypoints that parse; every problem of the list and of each entrypoint goes to
    `problems`. Ids become MCP tool names so they must be unique."""
    where = f"{file}: entrypoints"
    if raw is None:
        problems.append(f"{where}: is required (a non-empty list of entrypoints)")
        return ()
    if not isinstance(raw, list):
        problems.append(f"{where}: expected a list of entrypoints, got {json_type(raw)}")
        return ()
    if not raw:
        problems.append(f"{where}: must list at least one entrypoint")
        return ()
    entrypoints: list[Entrypoint] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        try:
            ep = _parse_entrypoint(item, root, item_where)
        except ProjectError as exc:
            problems.append(exc.message)
            continue
        if ep.id in seen:
            problems.append(f"{item_where}.id: duplicate entrypoint id {ep.id!r}")
            continue
        seen.add(ep.id)
        entrypoints.append(ep)
    return tuple(entrypoints)


def _parse_entrypoint(raw: Any, root: Path, where: str) -> Entrypoint:
    """One entrypoint; title and description fall back so MCP always has both."""
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected an entrypoint object, got {json_type(raw)}")
    ep_id = raw.get("id")
    if ep_id is None:
        raise ProjectError(f"{where}.id: is required")
    if not isinstance(ep_id, str) or not _ENTRYPOINT_ID_RE.fullmatch(ep_id):
        raise ProjectError(
            f"{where}.id: invalid entrypoint id {quote(ep_id)} "
            "(it is the MCP tool name: 1-64 of A-Z a-z 0-9 _ . -)"
        )
    title = optional_str(raw, "title", where) or ep_id
    description = optional_str(raw, "description", where) or title
    handler = _parse_handler(raw.get("handler"), root, f"{where}.handler")
    timeout = _parse_timeout(raw.get("timeoutSeconds"), f"{where}.timeoutSeconds")
    params = parse_params(raw.get("params"), where=f"{where}.params", headers=True)
    custom_schema = None
    if raw.get("inputSchema") is not None:
        if raw.get("params"):
            raise ProjectError(f"{where}: give params or inputSchema, not both")
        custom_schema = check_input_schema(raw["inputSchema"], f"{where}.inputSchema")
    knowledge = raw.get("knowledge", "read")
    if knowledge not in ("read", "write"):
        raise ProjectError(f'{where}.knowledge: expected "read" or "write", got {quote(knowledge)}')
    task = raw.get("task", TASK_DEFAULT)
    if task not in TASK_MODES:
        raise ProjectError(f'{where}.task: expected "never", "optional" or "required", got {quote(task)}')
    result_text = raw.get("resultText", "json")
    if result_text not in RESULT_TEXTS:
        raise ProjectError(f'{where}.resultText: expected "json" or "output", got {quote(result_text)}')
    requires = _parse_requires(raw.get("requires"), f"{where}.requires")
    return Entrypoint(
        id=ep_id,
        title=title,
        description=description,
        handler=handler,
        timeout_seconds=timeout,
        params=params,
        knowledge_write=knowledge == "write",
        task=task,
        result_text=result_text,
        input_schema=custom_schema,
        requires=requires,
    )


def _parse_requires(raw: Any, where: str) -> tuple[str, ...]:
    """`"requires"`: a list of distinct client capability names (absent or null: none)."""
    if raw is None:
        return ()
    allowed = ", ".join(f'"{name}"' for name in CLIENT_CAPABILITIES)
    if not isinstance(raw, list):
        raise ProjectError(
            f"{where}: expected a list of client capabilities ({allowed}), got {json_type(raw)}"
        )
    names: list[str] = []
    for index, name in enumerate(raw):
        if not isinstance(name, str) or name not in CLIENT_CAPABILITIES:
            raise ProjectError(
                f"{where}[{index}]: unknown client capability {quote(name)} (expected one of {allowed})"
            )
        if name in names:
            raise ProjectError(f"{where}[{index}]: {quote(name)} is listed twice")
        names.append(name)
    return tuple(names)


def _parse_handler(raw: Any, root: Path, where: str) -> str:
    """`"relative/file.py:function"`, confined to the project folder.

    The worker imports this file with the project as working directory, so a path that
    escapes the folder (absolute, `..`, symlink out) would run code the project does not own.
    """
    if raw is None:
        raise ProjectError(f'{where}: is required ("file.py:function")')
    if not isinstance(raw, str):
        raise ProjectError(f'{where}: expected a string "file.py:function", got {json_type(raw)}')
    file_part, sep, function = raw.rpartition(":")
    if not sep or not file_part:
        raise ProjectError(f'{where}: {quote(raw)} is not of the form "file.py:function"')
    if not function.isidentifier() or keyword.iskeyword(function):
        raise ProjectError(f"{where}: {quote(function)} is not a valid Python function name")
    if (
        PurePosixPath(file_part).is_absolute()
        or PureWindowsPath(file_part).is_absolute()
        or (file_part.startswith("\\"))
    ):
        raise ProjectError(f"{where}: handler file {quote(file_part)} must be relative to the project")
    if ".." in PurePosixPath(file_part.replace("\\", "/")).parts:
        raise ProjectError(f"{where}: handler file {quote(file_part)} must stay inside the project (no '..')")
    if not file_part.endswith(".py"):
        raise ProjectError(f"{where}: handler file {quote(file_part)} must be a .py file")
    path = (root / file_part).resolve()
    if not path.is_relative_to(root):
        raise ProjectError(f"{where}: handler file {quote(file_part)} resolves outside the project")
    if not path.is_file():
        raise ProjectError(f"{where}: handler file {quote(file_part)} does not exist in {root}")
    return raw


def _parse_timeout(raw: Any, where: str) -> float | None:
    """Optional positive number of seconds; null means no entrypoint-specific limit."""
    if raw is None:
        return None
    if not is_number(raw) or raw <= 0:
        raise ProjectError(f"{where}: expected a positive number of seconds, got {quote(raw)}")
    return raw  # int stays int, so the structure report echoes what the author wrote


# --------------------------------------------------------------------------- project


def _parse_project_type(data: dict[str, Any], where: str) -> None:
    """Only workflow projects are served; conversation/kanban ones must never leak out."""
    ptype = data.get("projectType")
    if ptype == WORKFLOW_PROJECT_TYPE:
        return
    shown = "missing" if ptype is None else quote(ptype)
    raise NotAProject(
        f'{where}: projectType: {shown} — not a workflow project (expected "workflow"), '
        "so it is never exposed over MCP"
    )


@dataclass(frozen=True)
class ProjectReading:
    """A project folder as far as it could be read: the project (None when anything is
    wrong) and every problem found, each one line `<file>[:<line>]: <problem>`; `handlers`:
    the entrypoints whose handler is well formed, for the handler check (those with other
    problems too); `entrypoints`, `project_id`, `name`: what did parse, for a server that
    can only tell the problems (`steamharness mcp`)."""

    root: Path
    project: Project | None
    problems: tuple[str, ...]
    handler_refs: tuple[HandlerRef, ...] = ()
    entrypoints: tuple[Entrypoint, ...] = ()
    project_id: str | None = None
    name: str | None = None

    @property
    def handlers(self) -> tuple[HandlerRef, ...]:
        """`handler_refs` with the package.json line of each, read when asked (a check needs
        them; loading a project does not)."""
        return _located(list(self.handler_refs), self.root / "package.json")


def read_project(root: Path | str) -> ProjectReading:
    """Read a workflow project folder, collecting every problem of its package.json rather
    than stopping at the first (a broken file, or not a workflow project, is one problem)."""
    folder = Path(root).resolve()
    path, data = read_package_json(folder)
    where = str(path)
    _parse_project_type(data, where)
    problems: list[str] = []

    def attempt(parse: Callable[[], T]) -> T | None:
        try:
            return parse()
        except ProjectError as exc:
            problems.append(exc.message)
            return None

    project_id = attempt(lambda: parse_id(data.get("id"), where))
    attempt(lambda: _parse_name(data.get("name"), where))
    version = attempt(lambda: _top_level_str(data, "version", where))
    description = attempt(lambda: _top_level_str(data, "description", where))
    entrypoints = _parse_entrypoints(data.get("entrypoints"), folder, where, problems)
    related = attempt(
        lambda: parse_related_projects(
            data.get("relatedProjects"), f"{where}: relatedProjects", project_id or ""
        )
    )
    config_fields = attempt(lambda: parse_config_fields(data, where))
    handlers = _handler_refs(data.get("entrypoints"), folder, where)
    if problems or project_id is None or related is None or config_fields is None:
        name = data.get("name") if isinstance(data.get("name"), str) else None
        return ProjectReading(
            folder, None, _with_lines(problems, path), tuple(handlers), entrypoints, project_id, name
        )
    project = Project(
        id=project_id,
        name=data["name"],
        version=version,
        description=description or "",
        root=folder,
        entrypoints=entrypoints,
        related=related,
        config_fields=config_fields,
    )
    return ProjectReading(folder, project, (), tuple(handlers), entrypoints, project_id, project.name)


def load_project(root: Path | str) -> Project:
    """Load and validate a workflow project folder, or raise `ProjectProblems` naming every
    problem of its package.json (one line each: `<file>:<line>: <field>: <problem>`)."""
    reading = read_project(root)
    if reading.project is None:
        raise ProjectProblems(list(reading.problems))
    return reading.project


def _parse_name(name: Any, where: str) -> str:
    if name is None:
        raise ProjectError(f"{where}: name: is required")
    if not isinstance(name, str) or not name.strip():
        raise ProjectError(f"{where}: name: expected a non-empty string, got {quote(name)}")
    return name


def _handler_refs(raw: Any, root: Path, where: str) -> list[HandlerRef]:
    """Each entrypoint's handler that is well formed and names a file of the project."""
    refs: list[HandlerRef] = []
    if not isinstance(raw, list):
        return refs
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            continue
        field = f"entrypoints[{index}].handler"
        try:
            handler = _parse_handler(item.get("handler"), root, f"{where}: {field}")
        except ProjectError:
            continue
        ep_id = item.get("id")
        name = (
            ep_id
            if isinstance(ep_id, str) and _ENTRYPOINT_ID_RE.fullmatch(ep_id)
            else f"entrypoints[{index}]"
        )
        refs.append(HandlerRef(name, handler, f"{where}: {field}"))
    return refs


def _lines_of(path: Path) -> dict[Pointer, int]:
    try:
        return value_lines(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # changed since it was read: no lines
        return {}


def _at_line(message: str, file: str, lines: dict[Pointer, int]) -> str:
    """`<file>: <field>...` as `<file>:<line>: <field>...` where the field's line is known."""
    line = problem_line(message, file, lines)
    return f"{file}:{line}: {message[len(file) + 2 :]}" if line is not None else message


def _with_lines(problems: list[str], path: Path) -> tuple[str, ...]:
    lines = _lines_of(path) if problems else {}
    return tuple(_at_line(message, str(path), lines) for message in problems)


def _located(refs: list[HandlerRef], path: Path) -> tuple[HandlerRef, ...]:
    lines = _lines_of(path) if refs else {}
    return tuple(dataclasses.replace(ref, where=_at_line(ref.where, str(path), lines)) for ref in refs)


def _top_level_str(data: dict[str, Any], key: str, where: str) -> str | None:
    """Optional top-level string, reported as `<file>: <key>: ...`."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProjectError(f"{where}: {key}: expected a string, got {json_type(value)}")
    return value


# --------------------------------------------------------------------------- structure report


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
                "task": ep.task,
                "resultText": ep.result_text,
                "params": [param_report(p) for p in ep.params],
                **({"inputSchema": json.loads(ep.input_schema)} if ep.input_schema is not None else {}),
                **({"requires": list(ep.requires)} if ep.requires else {}),
            }
            for ep in project.entrypoints
        ],
    }


# --------------------------------------------------------------------------- checked


def check_project(root: Path | str, bounds: CheckBounds, *, shown_root: Path | None = None) -> ProjectReading:
    """`read_project`, then every handler that names a file of the project imported and
    looked at in a bounded child (`webui.workflows.handlers`): the project only when none of
    it has a problem, else every problem at once. `shown_root`: the folder problems name
    instead (a publish checks a copy of its draft). Waits in this thread."""
    reading = read_project(root)
    found = check_handlers(reading.root, reading.handlers, bounds, shown_root=shown_root)
    return _with_handler_problems(reading, found)


def _with_handler_problems(reading: ProjectReading, found: list[str]) -> ProjectReading:
    if not found:
        return reading
    return dataclasses.replace(reading, project=None, problems=(*reading.problems, *found))


def read_or_problem(root: Path | str) -> ProjectReading:
    """`read_project`, a package.json that cannot be read at all (not JSON) being its one
    problem; a folder that is not a workflow project still raises `NotAProject`."""
    try:
        return read_project(root)
    except NotAProject:
        raise
    except ProjectError as exc:
        return ProjectReading(Path(root).resolve(), None, (exc.message,))
