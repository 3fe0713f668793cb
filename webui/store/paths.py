"""File paths kept in the store (published snapshots, managed files) relative to the shared
dir they live under, so the data dir (or shared dir) can move; and the one-off rewrite of
rows written before, when such paths were absolute.

A stored path is either relative (to the shared dir) or, for a file kept outside it (a
file store or created-files folder configured elsewhere), absolute.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, cast

from sqlalchemy import Table, update
from sqlalchemy.engine import Engine

from webui.store.models import ManagedFile, ProjectVersion

log = logging.getLogger(__name__)

_VERSIONS = cast(Table, ProjectVersion.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_FILES = cast(Table, ManagedFile.__table__)  # pyright: ignore[reportAttributeAccessIssue]


# Workflow code runs as another user with its working directory inside a snapshot (or a
# project folder). Walking up from there must stop at a folder that user cannot enter:
# every folder the server keeps for itself is the owner's alone.
PRIVATE_DIR_MODE = 0o700


def private_folder(path: Path) -> Path:
    """`path` as a folder only its owner can list or enter: created (with its parents) if
    missing, and tightened if an older version left it looser. Returns `path`."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    tighten(path)
    return path


def tighten(path: Path) -> None:
    """Take group and other bits off an existing folder (a no-op if it is already private,
    missing, or not a folder). A folder this process may not change (another user's, a
    read-only mount) is left as it is, with a warning: its owner, the server, tightens it
    when it starts."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077:
        try:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077 | PRIVATE_DIR_MODE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s is mode %o and could not be made private: %s", path, st.st_mode & 0o777, exc)


def seal_versions(versions_dir: Path) -> None:
    """The snapshots' folder and each project's folder in it private (folders made by
    older versions were 0755: a run could list `../..` and read other projects'
    snapshots). A snapshot itself keeps its modes: its run reaches it through the
    descriptor its worker opened before dropping privileges, never by name."""
    private_folder(versions_dir)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(versions_dir):
            if entry.is_dir(follow_symlinks=False):
                tighten(Path(entry.path))


def to_stored(path: Path, root: Path) -> str:
    """How `path` is written to the store: relative to `root` when under it, else absolute."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def resolve(stored: str, root: Path) -> Path:
    """The path a stored value names now: a relative one under `root`, an absolute one as is."""
    path = Path(stored)
    return path if path.is_absolute() else root / path


def _relative(stored: str, root: Path, tail: PurePosixPath) -> str | None:
    """The relative form of an absolute `stored` path: under `root`, or (the folder having
    moved) ending in `tail` where `root / tail` exists and the old path does not."""
    path = Path(stored)
    if not path.is_absolute():
        return None
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        pass
    found_again = path.parts[-len(tail.parts) :] == tail.parts and (root / tail).exists()
    if tail.parts and found_again and not path.exists():
        return tail.as_posix()
    return None


def _file_tail(row: Mapping[Any, Any]) -> PurePosixPath:
    """Where the default layout keeps a managed file under the shared dir."""
    storage = Path(row["storage"])
    if row["origin"] == "output" and storage.parent.name == row["id"]:
        return PurePosixPath("created-files", row["project_id"], row["id"], storage.name)
    return PurePosixPath("files", row["sha256"][:2], row["sha256"])


def relativize_paths(engine: Engine, root: Path) -> int:
    """Rewrite absolute snapshot and file paths under `root` (or, for a moved folder, found
    again under it) as paths relative to `root`; returns how many rows changed. Idempotent:
    relative rows and absolute paths elsewhere are left alone; each UPDATE checks the value
    it replaces, so two processes running it at once change each row once."""
    changed = 0
    with engine.begin() as conn:
        versions = (
            conn.execute(_VERSIONS.select().where(_VERSIONS.c.snapshot_dir.like("/%"))).mappings().all()
        )
        for row in versions:
            tail = PurePosixPath("versions", row["project_id"], row["version"])
            new = _relative(row["snapshot_dir"], root, tail)
            if new is not None:
                changed += conn.execute(
                    update(_VERSIONS)
                    .where(
                        _VERSIONS.c.project_id == row["project_id"],
                        _VERSIONS.c.version == row["version"],
                        _VERSIONS.c.snapshot_dir == row["snapshot_dir"],
                    )
                    .values(snapshot_dir=new)
                ).rowcount
        files = conn.execute(_FILES.select().where(_FILES.c.storage.like("/%"))).mappings().all()
        for row in files:
            new = _relative(row["storage"], root, _file_tail(row))
            if new is not None:
                changed += conn.execute(
                    update(_FILES)
                    .where(_FILES.c.id == row["id"], _FILES.c.storage == row["storage"])
                    .values(storage=new)
                ).rowcount
    return changed
