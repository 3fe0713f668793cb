"""Related projects: the `relatedProjects` field of `package.json` and the rule that a
relation holds only when both sides name each other.

`relatedProjects: [{"alias": "docs", "id": "<uuid>"}]` names, under a local alias, another
workflow project this one may call (run its entrypoints as child runs, read its KV store
and values). The other project must name this one back (under any alias of its own), or
the relation is refused. Pure: reads nothing but the two loaded projects.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Protocol

from pydantic import AfterValidator, FailFast, TypeAdapter, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass

from webui.errors import SteamharnessError
from webui.workflows.package_json import (
    ABSENT,
    UUID_RE,
    a_dict,
    anchored,
    check,
    described,
    listed,
    problem,
    validated,
)

ALIAS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


class RelatedProjectError(SteamharnessError):
    """A related project cannot be used: not declared, one-sided, missing, offline, or
    not permitted. The message names the alias and the project id."""

    code = "related_project"
    status = 409


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _matches(regex: re.Pattern[str]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) and regex.fullmatch(value) is not None


@dataclass(
    frozen=True,
    config=described(
        "Another workflow project this one may call (`ctx.related[alias]`); it must list this one back."
    ),
)
class RelatedRef:
    """One entry of `relatedProjects`: the local alias and the other project's id (lowercase)."""

    alias: Annotated[
        str,
        check(
            _matches(ALIAS_RE),
            lambda v: (
                f"{_shown(v)} is not a valid alias (1-64 of A-Z a-z 0-9 _ -, starting with a letter or _)"
            ),
            {"type": "string", "pattern": anchored(ALIAS_RE)},
            required="",
        ),
    ] = ABSENT
    """The local name."""
    id: Annotated[
        str,
        check(
            _matches(UUID_RE),
            lambda v: f"{_shown(v)} is not a UUID",
            {"type": "string", "pattern": anchored(UUID_RE)},
            required="(the related project's UUID)",
        ),
        AfterValidator(str.lower),
    ] = ABSENT
    """Its package.json id."""

    _object = a_dict("an object with alias and id")

    @field_validator("id")
    @classmethod
    def _not_itself(cls, pid: str, info: ValidationInfo) -> str:
        if info.context is not None and pid == info.context.get("own_id"):
            raise problem("a project cannot be related to itself")
        return pid


def _distinct(refs: tuple[RelatedRef, ...]) -> tuple[RelatedRef, ...]:
    for index, ref in enumerate(refs):
        if any(r.alias == ref.alias for r in refs[:index]):
            raise problem(f"duplicate alias {ref.alias!r}", at=f"[{index}].alias")
        if any(r.id == ref.id for r in refs[:index]):
            raise problem(f"project {ref.id} is already related (as another alias)", at=f"[{index}].id")
    return refs


_RELATED: Final = TypeAdapter(
    Annotated[
        tuple[RelatedRef, ...],
        FailFast(),
        AfterValidator(_distinct),
        listed("a list of {alias, id} objects", lambda v: type(v).__name__),
    ]
)


class Relating(Protocol):
    """What the relation rule reads of a loaded project (`webui.workflows.project.Project`,
    which builds on this module, so it is named here only by its shape)."""

    @property
    def id(self) -> str: ...
    @property
    def root(self) -> Path: ...
    @property
    def related(self) -> tuple[RelatedRef, ...]: ...


def parse_related_projects(raw: Any, where: str, own_id: str) -> tuple[RelatedRef, ...]:
    """`relatedProjects` (optional): a list of `{alias, id}`; aliases and ids unique, never
    the project itself. `where` is `<file>: relatedProjects`."""
    return validated(_RELATED, raw, where, {"own_id": own_id})


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
