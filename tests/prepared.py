"""Data dirs prepared once per test session (per xdist worker) and copied for each test.

Registering and publishing the example projects and hashing passwords costs about a second
in-process (and ten CLI subprocesses, ~1 s of imports each, through the CLI); a copy of a
prepared data dir costs a few milliseconds. Three kinds:

- `store`: only the SQLite store, migrated (a fresh one runs every migration, most of a
  second): for in-process services that start from an empty data dir;
- `web`: the example projects and the torture fixture registered where they are in the
  repository, those with a version published, an admin and a plain user (the page tests),
  their passwords hashed with `CHEAP_HASHER` (see there);
- `server`: the same projects copied into a `projects` folder beside the data dir (a live
  server's test may edit them), all registered and the five published as the CLI does it,
  no account (live servers are reached with the server admin key or keys they create).

A copy is a real data dir: the database file, published snapshots and keys are copied, and
the projects' stored folders are rewritten to the copy's `projects` folder. Nothing in it
points back at the template, so tests stay independent; the templates are removed at the
end of the session (`cleanup`)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from argon2 import PasswordHasher

from tests.conftest import EXAMPLES, TORTURE

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.store.models import Account

HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
INTERACTIVE = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
FILES = "3f2b8a44-1c5d-4e7f-8a9b-0c1d2e3f4a5b"
LEDGER = "9a1d2c3b-4e5f-4a6b-8c7d-1e2f3a4b5c6d"
TORTURE_ID = "0d4c9a6e-2b1f-4e3a-9c8d-7f6e5d4c3b2a"
PUBLISHED = (HELLO, INTERACTIVE, FILES, LEDGER, TORTURE_ID)
ADMIN = ("root", "admin-password-1")
USER = ("ann", "user-password-1")
DB_FILE = "steamharness.sqlite3"

# The template users' passwords are argon2id hashes with the smallest cost argon2 allows:
# logging in verifies with the parameters stored in the hash, and at the server's own cost
# (64 MiB, three passes) every page test's login took most of a second of both cores. The
# login path is the same code (verify, session row, audit event); the server's parameters
# are the hasher's own (`webui/auth/passwords.py`), used for every account a test creates
# through the pages, the CLI or `create_user` with a password.
CHEAP_HASHER = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)

_lock = threading.Lock()
_templates: dict[str, Path] = {}
_root: Path | None = None


def copy_projects(dest: Path) -> Path:
    """The example projects and the torture fixture, copied into `dest` (a test may edit them)."""
    shutil.copytree(EXAMPLES, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TORTURE, dest / "torture", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def add_user(engine: Engine, name: str, password: str, *, admin: bool) -> Account:
    """A user created as `users create` does it (the same rules and audit event), the
    password hashed with `CHEAP_HASHER`."""
    from webui.admin import create_user
    from webui.store import accounts as account_store

    account = create_user(engine, name=name, admin=admin, password=None)
    assert account.id is not None
    hashed = CHEAP_HASHER.hash(password)
    account_store.set_password(engine, account_id=account.id, password_hash=hashed)
    account.password_hash = hashed
    return account


def prepare_store(data_dir: Path) -> None:
    """Only the store, migrated to the current revision (nothing in it, no keys)."""
    from webui.store.db import make_engine, sqlite_url

    data_dir.mkdir(parents=True)
    make_engine(sqlite_url(data_dir / DB_FILE)).dispose()


def prepare_web(data_dir: Path, database_url: str | None = None) -> None:
    """The page tests' store: every example registered in place, published where it has a
    version, an admin and a plain user granted hello and interactive (passwords hashed with
    `CHEAP_HASHER`)."""
    from webui.admin import grant_projects
    from webui.projects.registry import ProjectRegistry
    from webui.settings import Settings
    from webui.store.db import make_engine

    settings = Settings(data_dir=data_dir, database_url=database_url)
    engine = make_engine(settings.resolved_database_url)
    try:
        registry = ProjectRegistry(engine, settings.versions_dir)
        for folder in (*sorted(p for p in EXAMPLES.iterdir() if p.is_dir()), TORTURE):
            project, _ = registry.register(folder)
            if project.version:
                registry.publish(project.id, project.version)
        add_user(engine, *ADMIN, admin=True)
        add_user(engine, *USER, admin=False)
        grant_projects(engine, user=USER[0], projects=[HELLO, INTERACTIVE], registry=registry)
    finally:
        engine.dispose()


def prepare_server(data_dir: Path, projects: Path, database_url: str | None = None, **env: str) -> None:
    """What `projects add` for each folder of `projects` and `projects publish` for the five
    published ids do through the CLI, in this process (the same registry calls, the same
    audit events); `env`: the server's STEAMHARNESS_* settings that decide where things go."""
    from webui.cli.common import cli_audit, open_store, server_settings

    given = {
        key.removeprefix("STEAMHARNESS_").lower(): value
        for key, value in env.items()
        if key in ("STEAMHARNESS_SHARED_DIR", "STEAMHARNESS_DATABASE_URL")
    }
    if database_url is not None:
        given["database_url"] = database_url
    settings = server_settings(data_dir, given.pop("database_url", None), **given)
    engine, registry = open_store(settings)
    try:
        for folder in sorted(projects.iterdir()):
            registry.register(folder)
        for project_id in PUBLISHED:
            registry.publish(project_id, None, actor="cli", audit=cli_audit())
    finally:
        engine.dispose()


def _template(kind: str) -> Path:
    global _root
    with _lock:
        if kind in _templates:
            return _templates[kind]
        if _root is None:
            _root = Path(tempfile.mkdtemp(prefix="steamharness-prepared-")).resolve()
        root = _root / kind
        root.mkdir()
        if kind == "store":
            prepare_store(root / "data")
        elif kind == "web":
            prepare_web(root / "data")
        elif kind == "server":
            prepare_server(root / "data", copy_projects(root / "projects"))
        else:
            raise ValueError(f"no prepared data dir of kind {kind!r}")
        _templates[kind] = root
        return root


def copy_prepared(kind: str, data_dir: Path, projects: Path | None = None) -> Path:
    """A copy of the prepared data dir `kind` at `data_dir` (and, for `server`, of its
    projects at `projects`, the stored folders rewritten to point there); returns `data_dir`."""
    template = _template(kind)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template / "data", data_dir, dirs_exist_ok=True)  # an empty mount point may be there
    if (template / "projects").is_dir():
        assert projects is not None, "a server data dir comes with its projects folder"
        shutil.copytree(template / "projects", projects)
        old, new = str(template / "projects"), str(projects.resolve())
        conn = sqlite3.connect(data_dir / DB_FILE)
        try:
            with conn:
                conn.execute(
                    "UPDATE projects SET root = ? || substr(root, ?) WHERE substr(root, 1, ?) = ?",
                    (new, len(old) + 1, len(old), old),
                )
        finally:
            conn.close()
    return data_dir


def copy_store(dest: Path) -> Path:
    """The `store` kind's database file alone, copied to `dest` (a store kept elsewhere than
    in a data dir); returns `dest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template("store") / "data" / DB_FILE, dest)
    return dest


def cleanup() -> None:
    """Remove the templates (at the end of the session)."""
    global _root
    with _lock:
        if _root is not None:
            shutil.rmtree(_root, ignore_errors=True)
        _root = None
        _templates.clear()
