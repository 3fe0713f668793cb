"""What the project pages show: a project's versions, its draft, the publish preview (the tool
contract diff against latest), its recent runs, and the one-line summary on the projects list.

Blocking (file and store reads): route handlers call these from a worker thread, except
`checked_preview`, which is async: the handler check it adds runs in a bounded child while the
event loop waits, never in a database thread."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

import anyio
from sqlalchemy.engine import Engine

from webui.blocking import run_db
from webui.errors import ProjectError, SteamharnessError
from webui.mcp.catalog import contract_changes
from webui.projects.drafts import DraftCopy
from webui.projects.registry import ProjectRegistry
from webui.store import projects as project_store
from webui.store import runs as run_store
from webui.store.models import ProjectRecord, Run
from webui.workflows.contract_diff import Change
from webui.workflows.project import Project
from webui.workflows.targets import Target, version_key

RECENT_RUNS = 10


@dataclass(frozen=True)
class VersionRow:
    version: str
    online: bool
    latest: bool
    revision: str
    published_at: datetime
    published_by: str | None


@dataclass(frozen=True)
class DraftView:
    project: Project | None
    revision: str | None
    problem: str | None  # why the draft does not load


@dataclass(frozen=True)
class PublishPreview:
    """The draft against latest, as a publish would change it for clients on `latest`."""

    base: str | None  # the latest online version compared with; None: nothing online yet
    version: str  # proposed: the draft's package.json version
    revision: str | None  # the draft revision the diff was made from
    changes: list[Change]
    problem: str | None  # the draft cannot be published as it is

    @property
    def breaking(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]


@dataclass(frozen=True)
class ListSummary:
    tools: int | None  # None: neither a version nor the draft loads
    tools_of: str  # "latest 1.0.0" or "draft"
    last_run: Run | None


def versions(registry: ProjectRegistry, project_id: str) -> list[VersionRow]:
    """Every published version, newest first."""
    online = registry.online_versions(project_id)
    latest = online[0].version if online else None
    rows = project_store.list_versions(registry.engine, project_id=project_id)
    rows.sort(key=lambda v: version_key(v.version), reverse=True)
    return [
        VersionRow(
            version=v.version,
            online=v.status == "online",
            latest=v.version == latest,
            revision=v.revision,
            published_at=v.published_at,
            published_by=v.published_by,
        )
        for v in rows
    ]


def draft(registry: ProjectRegistry, project_id: str) -> DraftView:
    try:
        return DraftView(registry.draft(project_id), registry.draft_revision(project_id), None)
    except (OSError, ProjectError) as exc:
        message = exc.message if isinstance(exc, ProjectError) else f"the draft folder cannot be read: {exc}"
        return DraftView(None, None, message)


def preview(registry: ProjectRegistry, project_id: str) -> PublishPreview:
    """The publish preview without the handler check; a draft that cannot be published gives
    `problem` and no changes.

    Made from one copy of the draft (`ProjectRegistry.copy_for_review`): the diff shown and
    the revision the form carries are of the same content, which is what a publish then checks
    its own copy against."""
    shown, copy = review(registry, project_id)
    if copy is not None:
        copy.discard()
    return shown


def review(registry: ProjectRegistry, project_id: str) -> tuple[PublishPreview, DraftCopy | None]:
    """`preview`, and the copy it was made from when the draft can be published as far as
    can be told without importing its handlers (the caller discards it)."""
    online = registry.online_versions(project_id)
    base = online[0].version if online else None
    try:
        copy = registry.copy_for_review(project_id)
    except (OSError, ProjectError) as exc:
        message = exc.message if isinstance(exc, ProjectError) else f"the draft folder cannot be read: {exc}"
        return PublishPreview(base, "", None, [], message), None
    project = copy.project
    try:
        registry.check_relations(project)
        old = registry.resolve(project_id, Target("latest")).project if base else None
        changes = contract_changes(old, project)
    except SteamharnessError as exc:
        copy.discard()
        return PublishPreview(base, project.version or "", copy.revision, [], exc.message), None
    except BaseException:
        copy.discard()
        raise
    return PublishPreview(base, project.version or "", copy.revision, changes, None), copy


async def checked_preview(registry: ProjectRegistry, project_id: str) -> PublishPreview:
    """The publish preview with the problems a publish would find in the handlers: those of
    the same copy the diff was made from, imported in the bounded child with no database
    thread held (the copy made and discarded in one)."""
    shown, copy = await run_db(review, registry, project_id)
    if copy is None:
        return shown
    try:
        problems = await registry.copy_problems(copy)
    finally:
        with anyio.CancelScope(shield=True):
            await run_db(copy.discard)
    return with_problems(shown, problems) if problems else shown


def with_problems(shown: PublishPreview, problems: list[str] | tuple[str, ...]) -> PublishPreview:
    """`shown` as a draft that cannot be published for `problems` (one a line)."""
    return dataclasses.replace(shown, changes=[], problem="\n".join(problems))


def recent_runs(engine: Engine, project_id: str, limit: int = RECENT_RUNS) -> list[Run]:
    """Newest first. Whoever may use a project sees its runs (the runs list's rule)."""
    return run_store.list_runs(engine, project_ids=[project_id], limit=limit)


def list_summary(registry: ProjectRegistry, record: ProjectRecord) -> ListSummary:
    """Tool count of what `latest` serves (else the draft's), and the newest run."""
    online = registry.online_versions(record.id)
    tools: int | None = None
    tools_of = f"latest {online[0].version}" if online else "draft"
    try:
        target = Target("latest") if online else Target("draft")
        tools = len(registry.resolve(record.id, target).project.entrypoints)
    except (OSError, SteamharnessError):
        tools = None
    runs = run_store.list_runs(registry.engine, project_ids=[record.id], limit=1)
    return ListSummary(tools, tools_of, runs[0] if runs else None)
