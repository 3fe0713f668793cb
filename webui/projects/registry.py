"""Registered projects, published versions and target resolution.

A project's working tree is its draft; publishing copies the draft into the shared dir as
an immutable version snapshot (its path stored relative to that dir, so the dir may move).
Resolving a target gives the exact thing a session is pinned to: a version number, or the
draft's content revision at that moment.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.errors import NotFound, ProjectError, ProjectProblems, SteamharnessError
from webui.projects.bytecode import compile_snapshot, compile_snapshot_async
from webui.projects.drafts import DraftCopy, DraftReview, copy_draft
from webui.projects.handler_check import check_bounds
from webui.settings import Settings
from webui.store import projects as project_store
from webui.store.db import AuditWrite
from webui.store.models import ProjectRecord, ProjectVersion
from webui.store.paths import private_folder, resolve, seal_versions, to_stored
from webui.workflows.handlers import CheckBounds, check_handlers, check_handlers_async
from webui.workflows.project import Project, check_project, load_project
from webui.workflows.related import RelatedProjectError, confirm_relation
from webui.workflows.targets import RevisionHasher, Target, check_version, version_key

log = logging.getLogger(__name__)


class VersionExists(SteamharnessError):
    code = "version_exists"
    status = 409


@dataclass(frozen=True)
class Resolved:
    """What a target resolved to. `key` names the exact catalog (version or revision)."""

    project: Project
    target: Target
    version: str | None  # exact version, None for the draft
    revision: str

    @property
    def key(self) -> str:
        return self.version or self.revision


class ProjectRegistry:
    def __init__(
        self,
        engine: Engine,
        versions_dir: Path,
        *,
        root: Path | None = None,
        settings: Settings | None = None,
    ) -> None:
        """`root`: the folder snapshot paths are stored relative to (the shared dir; by
        default the one `versions_dir` is in). `settings`: the handler check's bounds and
        user (by default, the settings' defaults)."""
        self.engine = engine
        self._settings = settings
        self._checks: CheckBounds | None = None
        self.versions_dir = versions_dir
        self.root = versions_dir.parent if root is None else root
        # Private before anything is published into it (and tightened if an older version
        # left it 0755): workflow code must not walk from its snapshot into another's.
        seal_versions(versions_dir)
        self.hasher = RevisionHasher()
        self._loaded: dict[tuple[str, str], Project] = {}

    # ------------------------------------------------------------------ registration
    @property
    def checks(self) -> CheckBounds:
        if self._checks is None:
            self._checks = check_bounds(self._settings or Settings.model_construct())
        return self._checks

    def register(self, root: Path) -> tuple[Project, bool]:
        """Register a project folder; registering the same folder again is harmless. Its
        handlers are not imported (`register_checked` does)."""
        return self._register(load_project(root.expanduser().resolve()))

    def register_checked(self, root: Path) -> tuple[Project, bool]:
        """`register` once its handlers were imported in the bounded child: every problem of
        the project refuses it at once (`ProjectProblems`). Waits in this thread for the child
        (`projects add`): never in a database thread or on the event loop."""
        return self._register(self.checked(root.expanduser().resolve()))

    def _register(self, project: Project) -> tuple[Project, bool]:
        existing = project_store.get_project(self.engine, project_id=project.id)
        if existing is not None and Path(existing.root) != project.root and Path(existing.root).is_dir():
            raise ProjectError(
                f"{project.root}/package.json: id {project.id} is already registered for {existing.root}"
            )
        _, created = project_store.upsert_project(
            self.engine, project_id=project.id, name=project.name, root=str(project.root)
        )
        return project, created

    def register_dir(self, projects_dir: Path) -> list[tuple[Path, str]]:
        """Register every workflow project directly under `projects_dir`.

        Returns the folders that were skipped with the reason (not workflows, broken)."""
        skipped: list[tuple[Path, str]] = []
        if not projects_dir.is_dir():
            raise ProjectError(f"{projects_dir}: projects dir does not exist")
        close_to_others(projects_dir)
        for child in sorted(projects_dir.iterdir()):
            if not child.is_dir() or not (child / "package.json").is_file():
                continue
            try:
                self.register(child)
            except ProjectError as exc:
                skipped.append((child, exc.message))
        return skipped

    def record(self, project_id: str) -> ProjectRecord:
        row = project_store.get_project(self.engine, project_id=project_id)
        if row is None:
            raise NotFound(f"project {project_id!r} is not registered")
        return row

    def set_limits(self, project_id: str, **changes: object) -> ProjectRecord:
        """Run gate and queue limits; read fresh before every tool call."""
        self.record(project_id)
        row = project_store.update_project(self.engine, project_id=project_id, **changes)
        assert row is not None
        return row

    def checked(self, folder: Path) -> Project:
        """The project in `folder` once its package.json and its handlers pass the check
        (the handlers imported in the bounded child); else `ProjectProblems` naming all."""
        reading = check_project(folder, self.checks)
        if reading.project is None:
            raise ProjectProblems(list(reading.problems))
        return reading.project

    def draft(self, project_id: str) -> Project:
        return load_project(Path(self.record(project_id).root))

    # ------------------------------------------------------------------ versions
    def publish(
        self,
        project_id: str,
        version: str | None = None,
        *,
        reviewed: str | None = None,
        actor: str | None = None,
        source: str = "cli",
        audit: AuditLog | None = None,
    ) -> ProjectVersion:
        """Copy the draft as version `version`. With `reviewed` (a revision someone reviewed),
        the copy itself must have that revision, else `DraftChanged` and nothing is stored:
        the draft may change while it is copied, so checking the draft before copying proves
        nothing about the copy. With `audit`, a `project.published` event commits with the
        new version's row.

        Waits in this thread for the handler check's and the compile's bounded children (the
        CLI). The server holds no database thread while they run: `copy_for_publish` and
        `store_publish` in a database thread, `ready_copy` between them on the event loop."""
        copy = self.copy_for_publish(project_id, version, reviewed=reviewed)
        try:
            # The copy's handlers, as its runs will import them.
            problems = check_handlers(copy.folder, copy.handlers, self.checks, shown_root=copy.project.root)
            if problems:
                raise ProjectProblems(problems)
            compile_snapshot(copy.folder)  # its runs load bytecode instead of compiling each time
            return self.store_publish(copy, actor=actor, source=source, audit=audit)
        finally:
            copy.discard()

    def copy_for_publish(
        self, project_id: str, version: str | None = None, *, reviewed: str | None = None
    ) -> DraftCopy:
        """The first part of a publish: the draft copied into a work folder under the project's
        versions, refused as `publish` refuses it (`DraftChanged`, a copy that does not load,
        `VersionExists`, relations), its version label set. The caller discards it."""
        root = Path(self.record(project_id).root)
        folder = self.versions_dir / project_id
        private_folder(folder)
        copy = copy_draft(project_id, root, folder, reviewed=reviewed)
        try:
            label = check_version(version or copy.project.version or "")
            self._refuse_existing(project_id, label)
            self.check_relations(copy.project)
        except BaseException:
            copy.discard()
            raise
        return dataclasses.replace(copy, label=label)

    async def copy_problems(self, copy: DraftCopy) -> list[str]:
        """The problems of the copy's handlers, imported in the bounded child while the event
        loop waits on it: no thread, no database connection is held for the check's time."""
        return await check_handlers_async(
            copy.folder, copy.handlers, self.checks, shown_root=copy.project.root
        )

    async def ready_copy(self, copy: DraftCopy) -> None:
        """The middle of a publish, on the event loop: the copy's handlers checked
        (`ProjectProblems` naming them all), then its files compiled, each in its bounded
        child, with no database thread held."""
        problems = await self.copy_problems(copy)
        if problems:
            raise ProjectProblems(problems)
        await compile_snapshot_async(copy.folder)  # its runs load bytecode instead of compiling each time

    def store_publish(
        self,
        copy: DraftCopy,
        *,
        actor: str | None = None,
        source: str = "cli",
        audit: AuditLog | None = None,
    ) -> ProjectVersion:
        """The last part of a publish: the checked copy moved into place and its row stored
        (with `audit`, a `project.published` event in the same commit)."""
        project_id = copy.project_id
        assert copy.label is not None, "a copy made by copy_for_publish"
        label = copy.label
        self._refuse_existing(project_id, label)  # another publish may have stored it meanwhile
        dest = self.versions_dir / project_id / label
        if dest.exists():
            shutil.rmtree(dest)  # left by a publish that stopped before its row was stored
        copy.folder.rename(dest)
        row = ProjectVersion(
            project_id=project_id,
            version=label,
            revision=copy.revision,
            snapshot_dir=to_stored(dest, self.root),
            published_by=actor,
        )
        write = None
        if audit is not None:
            details = {"version": label, "revision": row.revision}
            write = _audit_write(
                audit, AuditName.PROJECT_PUBLISHED, actor, source, project_id, label, details
            )
        return project_store.add_version(self.engine, row=row, audit=write)

    def _refuse_existing(self, project_id: str, label: str) -> None:
        if project_store.get_version(self.engine, project_id=project_id, version=label) is not None:
            raise VersionExists(f"project {project_id} already has version {label}; versions are immutable")

    def review_draft(self, project_id: str) -> DraftReview:
        """The draft loaded from one private copy and that copy's revision, so what is shown
        (its tools) and the revision it is named by are of the same content, even while the
        draft is being rewritten."""
        copy = self.copy_for_review(project_id)
        copy.discard()
        return DraftReview(copy.project, copy.revision)

    def copy_for_review(self, project_id: str) -> DraftCopy:
        """`review_draft`'s copy, kept for a check of its handlers (`copy_problems`); the
        caller discards it."""
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        root = Path(self.record(project_id).root)
        return copy_draft(project_id, root, self.versions_dir, prefix=".review-", suffix="")

    def check_relations(self, project: Project) -> None:
        """Every project `project` names in relatedProjects is registered here and (in its
        draft) names `project` back; else the first problem, naming the alias."""
        for ref in project.related:
            row = project_store.get_project(self.engine, project_id=ref.id)
            if row is None:
                raise RelatedProjectError(
                    f"{project.root}/package.json: relatedProjects: {ref.alias!r} ({ref.id}) is not a"
                    " project registered on this server; register it first"
                )
            try:
                other = load_project(Path(row.root))
                confirm_relation(project, ref.alias, other)
            except (ProjectError, RelatedProjectError) as exc:
                raise RelatedProjectError(
                    f"{project.root}/package.json: relatedProjects: {exc.message}"
                ) from None

    def set_online(
        self,
        project_id: str,
        version: str,
        online: bool,
        *,
        actor: str | None = None,
        source: str = "cli",
        audit: AuditLog | None = None,
    ) -> ProjectVersion:
        """With `audit`, a `project.version_online`/`_offline` event commits with the change
        (none when the version already had that state)."""
        self.record(project_id)
        status = "online" if online else "offline"
        write = None
        if audit is not None:
            event = AuditName.PROJECT_VERSION_ONLINE if online else AuditName.PROJECT_VERSION_OFFLINE
            write = _audit_write(audit, event, actor, source, project_id, version, {"version": version})
        row = project_store.set_version_status(
            self.engine, project_id=project_id, version=version, status=status, audit=write
        )
        if row is None:
            raise NotFound(f"project {project_id} has no version {version}")
        return row

    def online_versions(self, project_id: str) -> list[ProjectVersion]:
        rows = [
            v for v in project_store.list_versions(self.engine, project_id=project_id) if v.status == "online"
        ]
        return sorted(rows, key=lambda v: version_key(v.version), reverse=True)

    # ------------------------------------------------------------------ resolution
    def resolve(self, project_id: str, target: Target) -> Resolved:
        record = self.record(project_id)
        if target.kind == "draft":
            root = Path(record.root)
            project = load_project(root)
            return Resolved(project, target, None, self.hasher.revision(root))
        if target.kind == "latest":
            online = self.online_versions(project_id)
            if not online:
                raise NotFound(
                    f"project {project_id} has no online version (publish one, or use target=draft)"
                )
            row = online[0]
        else:
            assert target.version is not None
            found = project_store.get_version(self.engine, project_id=project_id, version=target.version)
            if found is None or found.status != "online":
                raise NotFound(f"project {project_id} has no online version {target.version}")
            row = found
        return Resolved(self._load_version(row), target, row.version, row.revision)

    def _load_version(self, row: ProjectVersion) -> Project:
        key = (row.project_id, row.version)
        if key not in self._loaded:  # snapshots are immutable: load each once
            self._loaded[key] = load_project(resolve(row.snapshot_dir, self.root))
        return self._loaded[key]

    def draft_revision(self, project_id: str) -> str:
        return self.hasher.revision(Path(self.record(project_id).root))


def close_to_others(projects_dir: Path) -> None:
    """A draft run works in its project's folder, as another user when the server is root:
    from there `..` is the projects dir, and its other folders (their code, their .env)
    must not be listable or enterable. The owner and group keep their access."""
    if os.geteuid() != 0:
        return  # workflow code runs as the server's own user: nothing to close
    mode = stat.S_IMODE(projects_dir.stat().st_mode)
    if mode & 0o007:
        try:
            os.chmod(projects_dir, mode & ~0o007)
        except OSError as exc:  # a read-only mount: say so, the folder still serves
            log.warning("projects dir %s could not be closed to other users: %s", projects_dir, exc)
            return
        log.info("projects dir %s: closed to other users (workflow code runs as one)", projects_dir)


def _audit_write(
    audit: AuditLog,
    event: AuditName,
    actor: str | None,
    source: str,
    project_id: str,
    version: str,
    details: dict[str, str],
) -> AuditWrite:
    return lambda s: audit.record(
        s,
        event,
        actor=actor,
        project_id=project_id,
        version=version,
        outcome="ok",
        source=source,
        details=details,
    )
