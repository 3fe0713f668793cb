"""Related projects on the server: publishing checks both sides of every relation; over
HTTP a handler runs a related project's entrypoint as a child run (at the same kind of
target), its question answered by the same client, and every refusal is a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.related_projects import GHOST, HELPER, MAIN, STRANGER, write_projects

STEAMHARNESS = str(Path(sys.executable).parent / "steamharness")


def cli(data: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [STEAMHARNESS, *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error:"), proc.stderr
    return lines[0]


def test_publishing_checks_that_every_related_project_names_this_one_back(tmp_path: Path) -> None:
    data = tmp_path / "data"
    f = write_projects(tmp_path / "p")
    for name in ("main", "helper", "stranger"):
        cli(data, "projects", "add", str(f[name]))
    line = refused(cli(data, "projects", "publish", MAIN, check=False))
    assert f"{f['main']}/package.json: relatedProjects:" in line
    assert f"'stranger' ({STRANGER}) does not name project {MAIN} back" in line

    f = write_projects(
        tmp_path / "p", main_related=[{"alias": "helper", "id": HELPER}, {"alias": "ghost", "id": GHOST}]
    )
    line = refused(cli(data, "projects", "publish", MAIN, check=False))
    assert f"'ghost' ({GHOST}) is not a project registered on this server; register it first" in line

    write_projects(tmp_path / "p", main_related=[{"alias": "helper", "id": HELPER}])
    assert cli(data, "projects", "publish", MAIN).stdout.strip() == "1.0.0"
    assert cli(data, "projects", "publish", HELPER).stdout.strip() == "1.0.0"
