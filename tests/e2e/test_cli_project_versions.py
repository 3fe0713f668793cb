"""`steamharness projects diff` (the draft's tool contract against a published version) and
the audit events of publish, offline and online from the CLI, through real CLI processes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from tests.conftest import EXAMPLES
from tests.e2e.test_cli_server import run
from webui.store.db import make_engine, sqlite_url
from webui.store.models import AuditEvent

COPY = "c3a1e2d4-6b5f-4a7e-8d9c-0b1a2c3d4e5f"


def greeter(tmp_path: Path) -> Path:
    folder = tmp_path / "greeter"
    shutil.copytree(EXAMPLES / "hello", folder, ignore=shutil.ignore_patterns("__pycache__"))
    edit(folder, lambda d: d.update(id=COPY, name="greeter"))
    return folder


def edit(folder: Path, change: Callable[[dict[str, Any]], object]) -> None:
    path = folder / "package.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_diff_prints_each_change_and_marks_the_breaking_ones(tmp_path: Path) -> None:
    data, folder = tmp_path / "data", greeter(tmp_path)
    assert run(data, "projects", "add", str(folder)).returncode == 0
    nothing = run(data, "projects", "diff", COPY)
    assert nothing.returncode == 0
    assert nothing.stdout.splitlines() == ["tool_added echo: new tool", "tool_added greet: new tool"]
    assert "against no online version" in nothing.stderr
    assert run(data, "projects", "publish", COPY).returncode == 0
    same = run(data, "projects", "diff", COPY)
    assert (same.returncode, same.stdout, same.stderr.splitlines()[0]) == (
        0,
        "",
        "0 change(s), 0 breaking, against latest",
    )

    def change(d: dict[str, Any]) -> None:
        params = d["entrypoints"][0]["params"]
        params[:] = [p for p in params if p["name"] != "shout"]
        params.append({"name": "style", "type": "string", "required": True})
        params.append({"name": "note", "type": "string"})

    edit(folder, change)
    diff = run(data, "projects", "diff", COPY)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines() == [
        "BREAKING param_removed greet.shout: param removed; calls that send it fail",
        "param_added greet.note: new optional param (string)",
        "BREAKING param_added greet.style: new required param (string)",
    ]
    assert diff.stderr.splitlines()[0] == "3 change(s), 2 breaking, against latest"
    assert diff.stderr.splitlines()[1].startswith("draft revision rev-")
    pinned = run(data, "projects", "diff", COPY, "--against", "1.0.0")
    assert pinned.stdout == diff.stdout
    missing = run(data, "projects", "diff", COPY, "--against", "9.9.9")
    assert missing.returncode != 0 and "no online version 9.9.9" in missing.stderr
    bad = run(data, "projects", "diff", COPY, "--against", "newest")
    assert bad.returncode != 0 and "1.2.3" in bad.stderr


def test_publish_offline_and_online_from_the_cli_are_audited(tmp_path: Path) -> None:
    data, folder = tmp_path / "data", greeter(tmp_path)
    assert run(data, "projects", "add", str(folder)).returncode == 0
    assert run(data, "projects", "publish", COPY).returncode == 0
    assert run(data, "projects", "offline", COPY, "1.0.0").returncode == 0
    assert run(data, "projects", "offline", COPY, "1.0.0").returncode == 0  # no change: no event
    assert run(data, "projects", "online", COPY, "1.0.0").returncode == 0
    engine = make_engine(sqlite_url(data / "steamharness.sqlite3"))
    with Session(engine) as s:
        rows = list(
            s.exec(select(AuditEvent).where(col(AuditEvent.project_id) == COPY).order_by(col(AuditEvent.id)))
        )
    engine.dispose()
    assert [(r.event, r.actor, r.source, r.version) for r in rows] == [
        ("project.published", "cli", "cli", "1.0.0"),
        ("project.version_offline", "cli", "cli", "1.0.0"),
        ("project.version_online", "cli", "cli", "1.0.0"),
    ]
