"""A private copy of a project's draft: what a publish checks, compiles and moves into place,
and what a publish preview shows and checks, of one consistent content whatever the draft
becomes meanwhile.

The draft is copied with its links as links (never followed), a link leaving the project
refuses the copy, and the copy is hashed by a fresh hasher and loaded on its own, named as the
draft folder the person knows. `webui.projects.registry` makes the copies and publishes them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from webui.errors import ProjectError, SteamharnessError
from webui.workflows.handlers import HandlerRef
from webui.workflows.project import Project, load_project, read_project
from webui.workflows.targets import SKIP_DIRS, RevisionHasher


class DraftChanged(SteamharnessError):
    """The draft copied for a publish is not the revision that was reviewed: nothing stored."""

    code = "draft_changed"
    status = 409

    def __init__(self, message: str, *, reviewed: str, copied: str) -> None:
        super().__init__(message)
        self.reviewed = reviewed
        self.copied = copied

    def details(self) -> dict[str, object]:
        return {"reviewed": self.reviewed, "revision": self.copied}


@dataclass(frozen=True)
class DraftReview:
    """The draft as one consistent copy: what a publish preview shows and names by revision."""

    project: Project  # loaded from the copy, `root` naming the draft folder
    revision: str  # the copy's content revision


@dataclass(frozen=True)
class DraftCopy:
    """One private copy of a project's draft, in a work folder of its own until `discard`:
    what a publish checks, compiles and moves into place, or what a preview shows and checks.
    What was checked is what is published or shown, whatever the draft becomes meanwhile."""

    project_id: str  # the registered project it is a draft of
    project: Project  # loaded from the copy, `root` naming the draft folder
    revision: str  # the copy's content revision
    work: Path  # the work folder; the copy is `folder`, in it
    handlers: tuple[HandlerRef, ...]  # its entrypoints' handlers, for the handler check
    label: str | None = None  # the version a publish stores it as

    @property
    def folder(self) -> Path:
        return self.work / "copy"

    def discard(self) -> None:
        """Remove the work folder and what is left in it (file work: in a thread)."""
        shutil.rmtree(self.work, ignore_errors=True)


def copy_draft(
    project_id: str,
    root: Path,
    under: Path,
    *,
    reviewed: str | None = None,
    prefix: str = ".publish-",
    suffix: str = ".incoming",
) -> DraftCopy:
    """The draft folder `root` of project `project_id` copied into a new work folder under
    `under`, loaded (named as the draft) with its revision; with `reviewed`, `DraftChanged`
    unless the copy has that revision. The work folder is removed again when the copy is
    refused."""
    work = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=under))
    try:
        tmp = work / "copy"
        revision = _copy_files(root, tmp)
        if reviewed is not None and revision != reviewed:
            raise DraftChanged(
                f"the draft of project {project_id} changed since it was reviewed (reviewed {reviewed},"
                f" now {revision}); review the new changes before publishing",
                reviewed=reviewed,
                copied=revision,
            )
        project = _load_copy(tmp, root)  # the snapshot must load on its own
        handlers = read_project(tmp).handlers
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return DraftCopy(project_id, project, revision, work, handlers)


def _copy_files(root: Path, tmp: Path) -> str:
    """Copy the draft folder `root` to `tmp` (which must not exist yet); the copy's revision.

    The copy is hashed by a fresh hasher: the shared one trusts size and mtime, and the
    copy keeps the draft's mtimes, so a rewrite of the same size within one clock tick
    would otherwise pass as the old content."""
    shutil.rmtree(tmp, ignore_errors=True)
    # Links are copied as links (never followed: a link to another project's files, or
    # to a device, would put what it names into the snapshot), then checked.
    shutil.copytree(root, tmp, symlinks=True, ignore=shutil.ignore_patterns(*SKIP_DIRS, "*.pyc"))
    _refuse_escaping_links(tmp)
    return RevisionHasher().revision(tmp)


def _refuse_escaping_links(copy: Path) -> None:
    """A link in the copied draft must name a file or folder inside the copy, by a
    relative path; else ProjectError naming it (nothing is published)."""
    base = copy.resolve()
    for dirpath, dirnames, filenames in os.walk(copy, followlinks=False):
        for name in (*dirnames, *filenames):
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            rel = path.relative_to(copy).as_posix()
            target = os.readlink(path)
            try:
                resolved = (path.parent / target).resolve()
                inside = resolved.is_relative_to(base) and resolved.exists()
            except (OSError, RuntimeError):  # a loop of links
                inside = False
            if os.path.isabs(target) or not inside:
                raise ProjectError(
                    f"{rel}: a link to {target!r}, outside the project folder (or to nothing);"
                    " only links to the project's own files can be published"
                )


def _load_copy(copy: Path, root: Path) -> Project:
    """The project loaded from `copy` of the draft folder `root`, named (and its problems
    reported) as the draft folder, which is what the person knows."""
    try:
        project = load_project(copy)
    except ProjectError as exc:
        raise ProjectError(exc.message.replace(str(copy), str(root))) from None
    return dataclasses.replace(project, root=root.resolve())
