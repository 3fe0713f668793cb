"""The zygote's code cache (webui.runs.codecache), in this process: what it compiles, and
when a worker may use it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webui.runs import codecache


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    codecache._compiled.clear()
    codecache._warmed.clear()
    codecache._cached_bytes = 0


def test_a_warmed_file_is_used_until_it_changes_and_is_named_after_the_path_it_is_loaded_by(
    tmp_path: Path,
) -> None:
    main = tmp_path / "main.py"
    main.write_text("def run(ctx):\n    return 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("X = 2\n")
    assert codecache.warm(str(tmp_path)) == 2
    code = codecache.code_for(str(main))
    assert code is not None and code.co_filename == str(main)
    via = f"/proc/self/fd/{os.open(tmp_path, os.O_RDONLY)}/main.py"
    assert codecache.code_for(via).co_filename == via  # type: ignore[union-attr]
    main.write_text("def run(ctx):\n    return 22\n")  # a draft being edited
    assert codecache.code_for(str(main)) is None
    assert codecache.warm(str(tmp_path)) == 0  # walked again only after REWARM_SECONDS
    codecache._warmed.clear()
    assert codecache.warm(str(tmp_path)) == 1
    namespace: dict[str, object] = {}
    exec(codecache.code_for(str(main)), namespace)  # type: ignore[arg-type]  # noqa: S102
    assert namespace["run"](None) == 22  # type: ignore[operator]


def test_symlinks_broken_files_and_skipped_folders_are_left_to_the_worker(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.py"
    secret.write_text("TOKEN = 'x'\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "link.py").symlink_to(secret)
    (project / "broken.py").write_text("def (:\n")
    (project / "node_modules").mkdir()
    (project / "node_modules" / "m.py").write_text("Y = 1\n")
    os.mkfifo(project / "fifo.py")
    assert codecache.warm(str(project)) == 0
    assert codecache.code_for(str(project / "link.py")) is None
    assert codecache.code_for(str(secret)) is None
    assert codecache.stats()["files"] == 0


def test_a_worker_that_cannot_open_the_file_gets_no_code(tmp_path: Path) -> None:
    main = tmp_path / "main.py"
    main.write_text("A = 1\n")
    codecache.warm(str(tmp_path))
    assert codecache.code_for(str(tmp_path / "missing.py")) is None
    fd = os.open(main, os.O_RDONLY)
    try:
        assert codecache.cached_code(fd, str(main)) is not None
    finally:
        os.close(fd)
    main.unlink()
    assert codecache.code_for(str(main)) is None


def test_one_warm_up_is_bounded_in_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codecache, "MAX_FILES_PER_FOLDER", 3)
    for i in range(10):
        (tmp_path / f"m{i}.py").write_text(f"V = {i}\n")
    assert codecache.warm(str(tmp_path)) == 3
