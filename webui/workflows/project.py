"""Loading a workflow project folder: its entrypoints, related projects and configuration
fields, and the structure report MCP catalogs are built from.

The file format and its error style are described in `package_json.py`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic_core import PydanticCustomError

from webui.errors import ProjectError, ProjectProblems
from webui.workflows.configuration import ConfigField, parse_config_fields
from webui.workflows.entrypoint import CLIENT_CAPABILITIES as CLIENT_CAPABILITIES  # its old home
from webui.workflows.entrypoint import ENTRYPOINT_ID_RE, Entrypoint, parse_entrypoint, parse_handler
from webui.workflows.handlers import CheckBounds, HandlerRef, check_handlers
from webui.workflows.package_json import (
    NotAProject,
    Pointer,
    json_type,
    parse_id,
    problem_line,
    quote,
    read_package_json,
    value_lines,
)
from webui.workflows.params import param_report
from webui.workflows.related import RelatedRef, parse_related_projects

WORKFLOW_PROJECT_TYPE: Final = "workflow"
T = TypeVar("T")


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
            ep = parse_entrypoint(item, root, item_where)
        except ProjectError as exc:
            problems.append(exc.message)
            continue
        if ep.id in seen:
            problems.append(f"{item_where}.id: duplicate entrypoint id {ep.id!r}")
            continue
        seen.add(ep.id)
        entrypoints.append(ep)
    return tuple(entrypoints)


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
            handler = parse_handler(item.get("handler"), root)
        except PydanticCustomError:
            continue
        ep_id = item.get("id")
        name = (
            ep_id if isinstance(ep_id, str) and ENTRYPOINT_ID_RE.fullmatch(ep_id) else f"entrypoints[{index}]"
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
