"""A project's handlers are imported only in the bounded child (issue 38, item 6), so what
an import does is bounded there: an import that loops forever (even one that swallows the
child's own deadline), allocates 10 GB, forks, or prints and raises terminal escapes is told
as that project's problem, terminal-safe, within the check's bounds; nothing of it reaches
the process that asked (`structure`, `projects add`, `mcp`), which answers in bounded time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import mcp_types as types
import pytest

from tests.cli.test_project_check import problems
from tests.cli.test_terminal_safe import HOSTILE, assert_terminal_safe
from tests.cli_runner import run_cli
from tests.helpers import WAIT
from tests.knowledge.test_cli import clean_env
from tests.workflows.test_handler_check import PROJECT_ID

SECONDS = 3  # the check's bound in these tests (STEAMHARNESS_HANDLER_CHECK_SECONDS)

LOOP = "while True:\n    pass\n"
# Catches the child's own deadline and goes on: only the parent's kill ends it.
STUBBORN = (
    "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"
)
ALLOCATE = "hoard = bytearray(10 * 1024**3)\n"
FORK = "import os\nif os.fork() == 0:\n    import time\n    time.sleep(3600)\n"
ESCAPES = (
    f"import sys\nprint({HOSTILE!r})\nprint({HOSTILE!r}, file=sys.stderr)\nraise ValueError({HOSTILE!r})\n"
)


def project(root: Path, source: str) -> Path:
    root.mkdir(parents=True)
    package = {
        "id": PROJECT_ID,
        "name": "hostile",
        "projectType": "workflow",
        "entrypoints": [{"id": "run", "handler": "main.py:run"}],
    }
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (root / "main.py").write_text(source + "\ndef run(ctx):\n    return 1\n", encoding="utf-8")
    return root


def structure(root: Path) -> list[str]:
    env = {**clean_env(), "STEAMHARNESS_HANDLER_CHECK_SECONDS": str(SECONDS)}
    started = time.monotonic()
    done = run_cli(["structure", str(root)], env=env)
    assert time.monotonic() - started < WAIT  # a hang guard, not a speed check
    assert_terminal_safe(done.stdout, done.stderr)
    return problems(done)


@pytest.mark.parametrize(
    ("source", "told"),
    [
        (
            LOOP,
            "main.py: importing main.py (the handler file of run): it did not finish within the check's time",
        ),
        (STUBBORN, ": the handlers in main.py could not be checked: importing them took over 3 s"),
        (
            ALLOCATE,
            "main.py: importing main.py (the handler file of run): ran out of the memory the check allows",
        ),
        (FORK, "main.py:2: importing main.py (the handler file of run): BlockingIOError: "),
    ],
)
def test_a_hostile_import_is_bounded_and_told_as_the_projects_problem(
    tmp_path: Path, source: str, told: str
) -> None:
    root = project(tmp_path / "p", source)
    found = structure(root)
    assert len(found) == 1 and told in found[0], found


def test_a_fork_at_import_leaves_no_process_behind(tmp_path: Path) -> None:
    root = project(tmp_path / "p", FORK)
    structure(root)
    # Only this test's: other tests running beside it check projects of their own.
    assert not _checking_under(tmp_path.resolve())


def test_escapes_an_import_prints_and_raises_reach_no_terminal(tmp_path: Path) -> None:
    root = project(tmp_path / "p", ESCAPES)
    found = structure(root)
    assert len(found) == 1 and "importing main.py (the handler file of run): ValueError: " in found[0]
    assert "\\x1b[2J" in found[0]  # shown as escapes, on one line
    env = {**clean_env(), "STEAMHARNESS_HANDLER_CHECK_SECONDS": str(SECONDS)}
    added = run_cli(["projects", "add", str(root), "--data-dir", str(tmp_path / "d")], env=env)
    assert_terminal_safe(added.stdout, added.stderr)
    assert problems(added) == found


def _check_children() -> set[int]:
    """The handler check's children (and any process a forked import left, which carries
    their command line): none may outlive the check."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if b"webui.bounded_child" in cmdline and b"handlers:check_child" in cmdline:
                found.add(int(name))
    return found


# ------------------------------------------------------------------ the server publishing one

COPY = "d7e1a3c2-5b4f-4e6a-9c8d-2f1e0a9b8c7d"


def _checking_under(folder: Path) -> bool:
    """A handler check's child is at work in a copy under `folder` (its working folder)."""
    for pid in _check_children():
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(folder)):
                return True
        except OSError:
            continue
    return False


def test_the_server_answers_while_a_publish_checks_an_import_that_never_ends(tmp_path: Path) -> None:
    """The web UI's publish imports the draft's handlers in the bounded child, off the event
    loop: /healthz and pages answer meanwhile; the publish is refused naming the file."""
    import concurrent.futures
    import shutil

    from fastapi.testclient import TestClient

    from tests.conftest import EXAMPLES
    from tests.security.test_knowledge_extraction import wait_until
    from tests.web.conftest import ADMIN, Web, prepare, rendered
    from webui.app import create_app
    from webui.projects.registry import ProjectRegistry
    from webui.store.db import make_engine

    settings = prepare(tmp_path / "data").model_copy(update={"handler_check_seconds": float(SECONDS)})
    folder = tmp_path / "greeter"
    shutil.copytree(EXAMPLES / "hello", folder, ignore=shutil.ignore_patterns("__pycache__"))
    package = json.loads((folder / "package.json").read_text())
    package.update(id=COPY, name="greeter")
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    engine = make_engine(settings.resolved_database_url)
    ProjectRegistry(engine, settings.versions_dir, settings=settings).register(folder)
    engine.dispose()
    handler_file = folder / package["entrypoints"][0]["handler"].rpartition(":")[0]
    handler_file.write_text(STUBBORN + handler_file.read_text(), encoding="utf-8")
    page = f"/projects/{COPY}"
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        web = Web(client, settings)
        token = web.login(*ADMIN)
        revision = rendered(client.get(f"{page}/publish")).context["publish"].revision
        form = {"csrf_token": token, "version": "", "revision": revision}
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            publishing = pool.submit(client.post, f"{page}/publish", data=form)
            wait_until(lambda: _checking_under(settings.versions_dir))
            for _ in range(3):
                assert client.get("/healthz").json()["status"] == "ok"
            assert client.get(page).status_code == 200
            posted = publishing.result(timeout=WAIT)
    assert posted.status_code == 422, posted.text
    error = rendered(posted).context["error"]
    assert (
        f"{folder}: the handlers in {handler_file.name} could not be checked: importing them took over"
        in error
    )
    assert not _checking_under(settings.versions_dir)


@pytest.mark.anyio
async def test_stdio_tells_the_client_and_its_stderr_what_a_hostile_import_raised_terminal_safe(
    tmp_path: Path,
) -> None:
    from tests.mcp.test_stdio_broken_project import call_and_log

    root = project(tmp_path / "p", ESCAPES)
    tools, result, stderr = await call_and_log(root, tmp_path / "data", "legacy")
    assert tools == ["run"] and result.is_error
    assert "importing main.py (the handler file of run): ValueError: \\x1b[2J" in stderr
    assert isinstance(result.content[0], types.TextContent)
    assert "ValueError: \\x1b[2J" in result.content[0].text  # the client's text too, escaped once
    assert_terminal_safe(stderr, result.content[0].text)
