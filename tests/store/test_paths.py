"""Snapshot and file paths stored relative to the shared dir, and the rewrite of rows
written when they were absolute: under the dir, after the dir moved, idempotent."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from tests.conftest import EXAMPLES
from webui.files.store import FileStore
from webui.projects.registry import ProjectRegistry
from webui.store import projects as project_store
from webui.store.db import get_row, make_engine, sqlite_url
from webui.store.models import ManagedFile, ProjectRecord, ProjectVersion
from webui.store.paths import private_folder, relativize_paths, resolve, seal_versions, to_stored
from webui.workflows.targets import Target

HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
SHA = "ab" + "0" * 62


def test_paths_under_the_root_are_stored_relative_and_others_absolute(tmp_path: Path) -> None:
    assert to_stored(tmp_path / "versions" / "p" / "1.0.0", tmp_path) == "versions/p/1.0.0"
    assert to_stored(Path("/elsewhere/files/x"), tmp_path) == "/elsewhere/files/x"
    assert resolve("versions/p/1.0.0", tmp_path) == tmp_path / "versions" / "p" / "1.0.0"
    assert resolve("/elsewhere/files/x", tmp_path) == Path("/elsewhere/files/x")


def publish_hello(shared: Path, engine: Engine) -> ProjectRegistry:
    project = shared.parent / "projects" / "hello"
    shutil.copytree(EXAMPLES / "hello", project, ignore=shutil.ignore_patterns("__pycache__"))
    registry = ProjectRegistry(engine, shared / "versions")
    registry.register(project)
    registry.publish(HELLO)
    return registry


def test_a_published_version_is_stored_relative_and_loads_after_the_data_dir_moved(tmp_path: Path) -> None:
    old = tmp_path / "old" / ".steamharness"
    engine = make_engine(sqlite_url(tmp_path / "db.sqlite3"))
    publish_hello(old, engine)
    row = project_store.get_version(engine, project_id=HELLO, version="1.0.0")
    assert row is not None and row.snapshot_dir == f"versions/{HELLO}/1.0.0"
    new = tmp_path / "new" / ".steamharness"
    new.parent.mkdir()
    old.rename(new)
    moved = ProjectRegistry(engine, new / "versions")
    resolved = moved.resolve(HELLO, Target("version", "1.0.0"))
    assert resolved.project.root == new / "versions" / HELLO / "1.0.0"
    assert relativize_paths(engine, new) == 0  # nothing absolute to rewrite


def absolute_rows(engine: Engine, root: Path) -> None:
    """Rows as an older version wrote them: absolute paths under `root`."""
    with Session(engine) as s:
        version = s.get(ProjectVersion, (HELLO, "1.0.0"))
        assert version is not None
        version.snapshot_dir = str(root / "versions" / HELLO / "1.0.0")
        s.add(version)
        blob = root / "files" / SHA[:2] / SHA
        blob.parent.mkdir(parents=True)
        blob.write_bytes(b"blob")
        created = root / "created-files" / HELLO / "wf_00000000000000c1" / "out.txt"
        created.parent.mkdir(parents=True)
        created.write_bytes(b"made")
        common = {"project_id": HELLO, "mime_type": "text/plain", "size": 4, "sha256": SHA}
        s.add(
            ManagedFile(id="wf_00000000000000b1", name="in.txt", origin="upload", storage=str(blob), **common)
        )
        s.add(
            ManagedFile(
                id="wf_00000000000000c1", name="out.txt", origin="output", storage=str(created), **common
            )
        )
        s.add(
            ManagedFile(id="wf_00000000000000e1", name="x", origin="upload", storage="/elsewhere/x", **common)
        )
        s.commit()


def stored(engine: Engine) -> dict[str, str]:
    version = get_row(engine, ProjectVersion, (HELLO, "1.0.0"))
    assert version is not None
    found = {"version": version.snapshot_dir}
    for file_id in ("wf_00000000000000b1", "wf_00000000000000c1", "wf_00000000000000e1"):
        row = get_row(engine, ManagedFile, file_id)
        assert row is not None
        found[file_id] = row.storage
    return found


EXPECTED = {
    "version": f"versions/{HELLO}/1.0.0",
    "wf_00000000000000b1": f"files/{SHA[:2]}/{SHA}",
    "wf_00000000000000c1": f"created-files/{HELLO}/wf_00000000000000c1/out.txt",
    "wf_00000000000000e1": "/elsewhere/x",  # outside the shared dir: kept as it was
}


def test_old_absolute_rows_still_read_and_are_rewritten_once(tmp_path: Path) -> None:
    root = tmp_path / "data"
    engine = make_engine(sqlite_url(tmp_path / "db.sqlite3"))
    publish_hello(root, engine)
    absolute_rows(engine, root)
    # Before the rewrite an absolute row reads as it always did.
    files = FileStore(engine, root / "files", max_bytes=1024)
    got = files.get("wf_00000000000000b1")
    assert got is not None and Path(got.storage).read_bytes() == b"blob"
    registry = ProjectRegistry(engine, root / "versions")
    assert (
        registry.resolve(HELLO, Target("version", "1.0.0")).project.root
        == root / "versions" / HELLO / "1.0.0"
    )
    assert relativize_paths(engine, root) == 3
    assert stored(engine) == EXPECTED
    assert relativize_paths(engine, root) == 0
    assert stored(engine) == EXPECTED
    got = files.get("wf_00000000000000c1")
    assert got is not None and Path(got.storage).read_bytes() == b"made"


def test_absolute_rows_of_a_moved_data_dir_are_found_again_under_the_new_one(tmp_path: Path) -> None:
    """The issue: a moved ~/.steamharness answered `…/versions/…: project folder does not exist`."""
    old = tmp_path / "old"
    engine = make_engine(sqlite_url(tmp_path / "db.sqlite3"))
    publish_hello(old, engine)
    absolute_rows(engine, old)
    new = tmp_path / "new"
    old.rename(new)
    assert relativize_paths(engine, new) == 3
    assert stored(engine) == EXPECTED
    registry = ProjectRegistry(engine, new / "versions")
    assert registry.resolve(HELLO, Target("latest")).version == "1.0.0"
    got = FileStore(engine, new / "files", max_bytes=1024).get("wf_00000000000000b1")
    assert got is not None and Path(got.storage).read_bytes() == b"blob"


def test_an_absolute_path_that_still_exists_elsewhere_is_left_alone(tmp_path: Path) -> None:
    old = tmp_path / "old"
    engine = make_engine(sqlite_url(tmp_path / "db.sqlite3"))
    publish_hello(old, engine)
    absolute_rows(engine, old)
    shutil.copytree(old, tmp_path / "copy")  # a copy, not a move: the old paths still work
    assert relativize_paths(engine, tmp_path / "copy") == 0
    with Session(engine) as s:
        assert s.get(ProjectRecord, HELLO) is not None


# ------------------------------------------------------------------ private folders


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_private_folder_is_created_owner_only_and_an_open_one_is_tightened(tmp_path: Path) -> None:
    made = private_folder(tmp_path / "new")
    assert _mode(made) == 0o700
    old = tmp_path / "old"
    old.mkdir()
    os.chmod(old, 0o755)
    private_folder(old)
    assert _mode(old) == 0o700


def test_sealing_versions_closes_each_projects_folder_but_leaves_the_snapshots(tmp_path: Path) -> None:
    snapshot = tmp_path / "versions" / "p1" / "1.0.0"
    snapshot.mkdir(parents=True)
    for folder in (tmp_path / "versions", tmp_path / "versions" / "p1", snapshot):
        os.chmod(folder, 0o755)
    (tmp_path / "versions" / "stray-file").write_text("x", encoding="utf-8")
    seal_versions(tmp_path / "versions")
    assert _mode(tmp_path / "versions") == 0o700
    assert _mode(tmp_path / "versions" / "p1") == 0o700
    assert _mode(snapshot) == 0o755  # reached by its run through a descriptor, never by name


def test_a_registry_and_a_file_store_make_their_folders_private(tmp_path: Path, engine: Engine) -> None:
    versions, blobs = tmp_path / "shared" / "versions", tmp_path / "shared" / "files"
    for folder in (versions, blobs):
        folder.mkdir(parents=True)
        os.chmod(folder, 0o755)
    ProjectRegistry(engine, versions)
    FileStore(engine, blobs, max_bytes=1024)
    assert _mode(versions) == _mode(blobs) == 0o700
