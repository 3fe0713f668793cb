"""`steamharness structure`, `projects add` and `projects publish` check a project as its
runs will meet it (issue 38, item 6): every entrypoint's handler imported in the bounded child
(its file, its function, its signature) besides package.json, and every problem told at once,
one `steamharness: error: <file>:<line>: ...` line each, exit 2, nothing on stdout, nothing
registered or published."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli_runner import run_cli
from tests.knowledge.test_cli import clean_env, ok
from tests.workflows.test_handler_check import PROJECT_ID, broken_project, line_of

ERROR = "steamharness: error: "


def problems(done: subprocess.CompletedProcess[str]) -> list[str]:
    """A refusal's lines: exit 2, stdout empty, every stderr line an error."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith(ERROR) for line in lines), done.stderr
    return [line.removeprefix(ERROR) for line in lines]


def expected(root: Path) -> list[str]:
    """The five problems of `broken_project`, each at its file and line."""
    package, main = root / "package.json", root / "main.py"
    return [
        f"{package}:{line_of(package, 'nowhere.py:run')}: entrypoints[2].handler: handler file 'nowhere.py'"
        f" does not exist in {root}",
        f"{package}:{line_of(package, 'strnig')}: entrypoints[4].params[0].type: unknown param type",
        f"{package}:{line_of(package, 'main.py:gret')}: entrypoints[1].handler: entrypoint missing_function,"
        " handler 'main.py:gret': main.py defines no function 'gret' (did you mean 'greet'?)",
        f"{main}:{line_of(main, 'def two')}: entrypoint two_args, handler 'main.py:two':"
        " def two(ctx, params)",
        f"{main}:{line_of(main, 'async def later')}: entrypoint async_one, handler 'main.py:later':"
        " later is async",
    ]


def assert_lists(found: list[str], wanted: list[str]) -> None:
    assert len(found) == len(wanted), found
    for line, start in zip(found, wanted, strict=True):
        assert line.startswith(start), (line, start)


def test_structure_lists_every_problem_with_its_file_and_line(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    assert_lists(problems(run_cli(["structure", str(root)], env=clean_env())), expected(root))


def test_structure_keeps_its_report_for_a_project_that_passes(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    package = json.loads((root / "package.json").read_text())
    package["entrypoints"] = package["entrypoints"][:1]
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    done = ok(run_cli(["structure", str(root)], env=clean_env()))
    assert done.stderr == ""
    report = json.loads(done.stdout)
    assert report["id"] == PROJECT_ID and [e["id"] for e in report["entrypoints"]] == ["greet"]


def test_projects_add_refuses_the_project_with_every_problem_and_registers_nothing(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    data = tmp_path / "data"
    done = run_cli(["projects", "add", str(root), "--data-dir", str(data)], env=clean_env())
    assert_lists(problems(done), expected(root))
    listed = ok(run_cli(["projects", "list", "--data-dir", str(data)], env=clean_env()))
    assert json.loads(listed.stdout) == []


def test_publish_refuses_a_draft_whose_handler_broke_after_it_was_added(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    package = json.loads((root / "package.json").read_text())
    package["entrypoints"] = package["entrypoints"][:1]
    package["version"] = "1.0.0"
    (root / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
    data = tmp_path / "data"
    ok(run_cli(["projects", "add", str(root), "--data-dir", str(data)], env=clean_env()))
    main = root / "main.py"
    main.write_text(main.read_text().replace("def greet(ctx):", "def greet():"), encoding="utf-8")
    done = run_cli(["projects", "publish", PROJECT_ID, "--data-dir", str(data)], env=clean_env())
    assert problems(done) == [
        f"{main}:{line_of(main, 'def greet')}: entrypoint greet, handler 'main.py:greet':"
        " def greet() cannot be called as a run calls it: greet(ctx), with one argument"
    ]  # the draft's file named, not the copy the check imported
    listed = ok(run_cli(["projects", "list", "--data-dir", str(data)], env=clean_env()))
    assert json.loads(listed.stdout)[0]["versions"] == {}
