"""Every entrypoint's handler checked before any run (webui.workflows.handlers): its file, its
function, its signature, imported only in the bounded child; every problem of a project
(its package.json's too) told at once, each with its file and line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from webui.bounded_child import RunAs
from webui.errors import ProjectProblems
from webui.workflows.handlers import CheckBounds
from webui.workflows.project import check_project, load_project, read_project

PROJECT_ID = "11111111-1111-4111-8111-111111111111"

MAIN = """\
import helpers


def greet(ctx):
    return {"hello": ctx.params.get("who")}


def two(ctx, params):
    return params


async def later(ctx):
    return 1
"""


def bounds() -> CheckBounds:
    """As the CLI's: under root, the worker user (nobody) imports the handlers."""
    run_as = RunAs(65534, 65534) if os.geteuid() == 0 else None
    return CheckBounds(seconds=20, run_as=run_as)


def broken_project(root: Path) -> Path:
    """A missing function, a missing file, a wrong signature, an async handler and a param of
    an unknown type: five problems in five entrypoints."""
    entrypoints: list[dict[str, Any]] = [
        {"id": "greet", "handler": "main.py:greet"},
        {"id": "missing_function", "handler": "main.py:gret"},
        {"id": "missing_file", "handler": "nowhere.py:run"},
        {"id": "two_args", "handler": "main.py:two"},
        {"id": "bad_param", "handler": "main.py:greet", "params": [{"name": "who", "type": "strnig"}]},
        {"id": "async_one", "handler": "main.py:later"},
    ]
    package = {"id": PROJECT_ID, "name": "broken", "projectType": "workflow", "entrypoints": entrypoints}
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
    (root / "main.py").write_text(MAIN, encoding="utf-8")
    (root / "helpers.py").write_text("VALUE = 1\n", encoding="utf-8")
    for path in (root, *root.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_every_problem_is_told_at_once_with_its_file_and_line(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    package, main = root / "package.json", root / "main.py"
    reading = check_project(root, bounds())
    assert reading.project is None
    assert list(reading.problems) == [
        f"{package}:{line_of(package, 'nowhere.py:run')}: entrypoints[2].handler: handler file 'nowhere.py'"
        f" does not exist in {root}",
        f"{package}:{line_of(package, 'strnig')}: entrypoints[4].params[0].type: unknown param type 'strnig'"
        " (expected one of: string, positional, number, integer, boolean, checkboxes, file)",
        f"{package}:{line_of(package, 'main.py:gret')}: entrypoints[1].handler: entrypoint missing_function,"
        " handler 'main.py:gret': main.py defines no function 'gret' (did you mean 'greet'?)",
        f"{main}:{line_of(main, 'def two')}: entrypoint two_args, handler 'main.py:two': def two(ctx, params)"
        " cannot be called as a run calls it: two(ctx), with one argument",
        f"{main}:{line_of(main, 'async def later')}: entrypoint async_one, handler 'main.py:later': later is"
        " async; a handler is a plain `def later(ctx)`",
    ]
    with pytest.raises(ProjectProblems) as raised:
        load_project(root)  # the loader alone: every problem of package.json at once
    assert len(raised.value.problems) == 2 and raised.value.message == "\n".join(raised.value.problems)


def test_a_project_that_passes_is_loaded_as_before(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    package = json.loads((root / "package.json").read_text())
    package["entrypoints"] = package["entrypoints"][:1]
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    reading = check_project(root, bounds())
    assert reading.problems == () and reading.project == load_project(root)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def run(ctx):\n    return 1\nx = (\n",
            ":3: importing main.py (the handler file of a, b): SyntaxError: ",
        ),
        (
            "import helpers\nhelpers.boom()\ndef run(ctx): pass\n",
            "/helpers.py:2: importing main.py (the handler"
            " file of a, b): ZeroDivisionError: division by zero",
        ),
        ("raise SystemExit(3)\n", "/main.py:1: importing main.py (the handler file of a, b): SystemExit: 3"),
        ("run = 3\n", ": entrypoint a, handler 'main.py:run': run is a int, not a function"),
        (
            "def run():\n    pass\n",
            "/main.py:1: entrypoint a, handler 'main.py:run': def run() cannot be called",
        ),
        ("def run(ctx, *, key):\n    pass\n", "def run(ctx, *, key) cannot be called as a run calls it"),
        ("def run(ctx):\n    yield 1\n", "/main.py:1: entrypoint a, handler 'main.py:run': run yields"),
    ],
)
def test_a_handler_file_that_does_not_import_or_a_function_runs_cannot_call(
    tmp_path: Path, source: str, expected: str
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    entrypoints = [{"id": "a", "handler": "main.py:run"}, {"id": "b", "handler": "main.py:run"}]
    package = {"id": PROJECT_ID, "name": "x", "projectType": "workflow", "entrypoints": entrypoints}
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (root / "main.py").write_text(source, encoding="utf-8")
    (root / "helpers.py").write_text("def boom():\n    return 1 / 0\n", encoding="utf-8")
    reading = check_project(root, bounds())
    assert reading.project is None and len(reading.problems) in (1, 2)
    assert any(expected in problem for problem in reading.problems), reading.problems


def test_the_check_names_the_folder_its_caller_knows(tmp_path: Path) -> None:
    """A publish checks a copy of the draft: its problems name the draft."""
    root = broken_project(tmp_path / "p")
    reading = read_project(root)
    from webui.workflows.handlers import check_handlers

    found = check_handlers(root, reading.handlers, bounds(), shown_root=Path("/the/draft"))
    assert found and all(p.startswith("/the/draft/") for p in found), found


def test_a_numeric_library_that_starts_threads_when_imported_passes(tmp_path: Path) -> None:
    """The child may start no thread; OpenBLAS (under numpy) is told to use one, so a
    handler importing numpy is no problem, while one starting a thread at import is."""
    pytest.importorskip("numpy")
    root = tmp_path / "p"
    root.mkdir()
    entrypoints = [{"id": "a", "handler": "main.py:run"}, {"id": "b", "handler": "threads.py:run"}]
    package = {"id": PROJECT_ID, "name": "x", "projectType": "workflow", "entrypoints": entrypoints}
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (root / "main.py").write_text("import numpy\n\ndef run(ctx):\n    return 1\n", encoding="utf-8")
    started = "import threading\nthreading.Thread(target=print).start()\n\ndef run(ctx):\n    return 1\n"
    (root / "threads.py").write_text(started, encoding="utf-8")
    reading = check_project(root, bounds())
    assert len(reading.problems) == 1, reading.problems
    assert reading.problems[0].startswith(
        f"{root}/threads.py:2: importing threads.py (the handler file of b):"
    )
    assert "start them in the handler" in reading.problems[0]
