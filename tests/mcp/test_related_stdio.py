"""Related projects over stdio: the real `steamharness mcp DIR --related-project a=/dir`
process, driven by the Python SDK client. Relations are checked at start; a handler runs
a related project's entrypoint as a child run whose question reaches the same client."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.mcp.test_stdio_protocol import STEAMHARNESS
from tests.related_projects import HELPER, MAIN, STRANGER, write_projects

pytestmark = pytest.mark.anyio


def start_failure(tmp_path: Path, *args: str) -> str:
    proc = subprocess.run(
        [STEAMHARNESS, "mcp", *args, "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error:"), proc.stderr
    return lines[0]


def test_a_one_sided_relation_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"stranger={f['stranger']}")
    assert f"--related-project stranger: related project 'stranger' ({STRANGER}) does not name" in line
    assert f"project {MAIN} back" in line
    # and from the other side: the stranger declares nothing at all
    line = start_failure(tmp_path, str(f["stranger"]), "--related-project", f"main={f['main']}")
    assert "--related-project main: related project 'main' is not declared" in line


def test_an_alias_the_project_does_not_declare_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"nope={f['helper']}")
    assert "--related-project nope: related project 'nope' is not declared in relatedProjects" in line
    assert "(declared: 'helper', 'stranger', 'ghost')" in line


def test_a_folder_holding_another_project_than_declared_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"helper={f['stranger']}")
    assert f"is project {STRANGER}, but relatedProjects of project {MAIN} names {HELPER}" in line


def test_a_folder_that_is_no_project_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"helper={empty}")
    assert f"--related-project helper: {empty}: no package.json" in line
