"""Related projects: the `relatedProjects` field of `package.json` and the rule that a
relation holds only when both sides name each other.

`relatedProjects: [{"alias": "docs", "id": "<uuid>"}]` names, under a local alias, another
workflow project this one may call (run its entrypoints as child runs, read its KV store
and values). The other project must name this one back (under any alias of its own), or
the relation is refused. Pure: reads nothing but the two loaded projects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from webui.errors import ProjectError, SteamharnessError

ALIAS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class RelatedProjectError(SteamharnessError):
    """A related project cannot be used: not declared, one-sided, missing, offline, or
    not permitted. The message names the alias and the project id."""

    code = "related_project"
    status = 409


@dataclass(frozen=True)
class RelatedRef:
    """One entry of `relatedProjects`: the local alias and the other project's id."""

    alias: str
    id: str


class Relating(Protocol):
    """What the relation rule reads of a loaded project (`webui.workflows.project.Project`,
    which builds on this module, so it is named here only by its shape)."""

    @property
    def id(self) -> str: ...
    @property
    def root(self) -> Path: ...
    @property
    def related(self) -> tuple[RelatedRef, ...]: ...


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_related_projects(raw: Any, where: str, own_id: str) -> tuple[RelatedRef, ...]:
    """`relatedProjects` (optional): a list of `{alias, id}`; aliases and ids unique, never
    the project itself. `where` is `<file>: relatedProjects`."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: expected a list of {{alias, id}} objects, got {type(raw).__name__}")
    refs: list[RelatedRef] = []
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ProjectError(f"{item_where}: expected an object with alias and id")
        alias = item.get("alias")
        if alias is None:
            raise ProjectError(f"{item_where}.alias: is required")
        if not isinstance(alias, str) or not ALIAS_RE.fullmatch(alias):
            raise ProjectError(
                f"{item_where}.alias: {_shown(alias)} is not a valid alias "
                "(1-64 of A-Z a-z 0-9 _ -, starting with a letter or _)"
            )
        pid = item.get("id")
        if pid is None:
            raise ProjectError(f"{item_where}.id: is required (the related project's UUID)")
        if not isinstance(pid, str) or not _UUID_RE.fullmatch(pid):
            raise ProjectError(f"{item_where}.id: {_shown(pid)} is not a UUID")
        pid = pid.lower()
        if pid == own_id:
            raise ProjectError(f"{item_where}.id: a project cannot be related to itself")
        if any(r.alias == alias for r in refs):
            raise ProjectError(f"{item_where}.alias: duplicate alias {alias!r}")
        if any(r.id == pid for r in refs):
            raise ProjectError(f"{item_where}.id: project {pid} is already related (as another alias)")
        refs.append(RelatedRef(alias=alias, id=pid))
    return tuple(refs)


def declared(project: Relating, alias: str) -> RelatedRef:
    """The project's relation under `alias`, or a clear error listing the declared ones."""
    for ref in project.related:
        if ref.alias == alias:
            return ref
    known = ", ".join(repr(r.alias) for r in project.related) or "none"
    raise RelatedProjectError(
        f"related project {alias!r} is not declared in relatedProjects of project {project.id}"
        f" (declared: {known})"
    )


def confirm_relation(project: Relating, alias: str, other: Relating) -> RelatedRef:
    """The relation `project` → `other` under `alias`, confirmed by both sides."""
    ref = declared(project, alias)
    if other.id != ref.id:
        raise RelatedProjectError(
            f"related project {alias!r}: {other.root} is project {other.id}, but relatedProjects"
            f" of project {project.id} names {ref.id} for this alias"
        )
    if not any(r.id == project.id for r in other.related):
        raise RelatedProjectError(
            f"related project {alias!r} ({other.id}) does not name project {project.id} back in its"
            " relatedProjects: a relation must be confirmed by both projects"
        )
    return ref
