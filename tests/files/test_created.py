"""The created-files folder's layout and its checks (webui.files.created)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from webui.errors import ConfigError
from webui.files.created import NAME_BYTES, created_path, disk_name, prepare_dir


def test_a_created_file_gets_a_fresh_owner_only_folder_of_its_own(tmp_path: Path) -> None:
    path = created_path(tmp_path / "out", "proj", "wf_0123456789abcdef", "report.pdf")
    assert path == tmp_path / "out" / "proj" / "wf_0123456789abcdef" / "report.pdf"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with pytest.raises(FileExistsError):  # an id is never reused for a second file
        created_path(tmp_path / "out", "proj", "wf_0123456789abcdef", "other.pdf")


@pytest.mark.parametrize(("project", "file_id"), [("..", "wf_1"), ("a/b", "wf_1"), ("p", "."), ("p", "")])
def test_ids_that_are_not_one_path_component_are_refused(tmp_path: Path, project: str, file_id: str) -> None:
    with pytest.raises(ValueError, match="not a single path component"):
        created_path(tmp_path, project, file_id, "x.txt")
    assert list(tmp_path.iterdir()) == []


def test_long_names_are_cut_to_fit_the_disk_keeping_their_extension() -> None:
    assert disk_name("short.txt") == "short.txt"
    long = "é" * 300 + ".csv"
    cut = disk_name(long)
    assert cut.endswith(".csv") and len(cut.encode()) <= NAME_BYTES
    assert cut.startswith("é" * 50)
    odd = "x" * 300 + "." + "y" * 40  # an "extension" too long to be one
    assert len(disk_name(odd).encode()) <= NAME_BYTES


def test_prepare_dir_makes_a_missing_folder_owner_only_and_leaves_no_probe(tmp_path: Path) -> None:
    folder = prepare_dir(tmp_path / "a" / "b", "--opt")
    assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert list(folder.iterdir()) == []


def test_prepare_dir_names_the_option_in_each_refusal(tmp_path: Path) -> None:
    taken = tmp_path / "file"
    taken.write_text("x", encoding="utf-8")
    cases = [
        (Path("rel"), "--opt must be an absolute path, got 'rel'"),
        (taken, f"--opt: {taken} is not a folder"),
        (taken / "sub", f"--opt: cannot create {taken / 'sub'}: Not a directory"),
    ]
    for path, message in cases:
        with pytest.raises(ConfigError) as err:
            prepare_dir(path, "--opt")
        assert err.value.message == message
    assert taken.read_text(encoding="utf-8") == "x"
