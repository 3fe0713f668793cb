"""Attack pass on issue 38's handler check (webui.workflows.handlers, webui.bounded_child):
what a hostile handler module can do from its import, in the bounded child, to the process
that asked for the check (the server's publish, `projects add`, `structure`)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import WAIT
from tests.knowledge.test_cli import clean_env
from tests.security.test_hostile_handler_imports import project
from webui.host.unprivileged import ENV_VARIABLE
from webui.projects.handler_check import check_bounds, check_uid
from webui.settings import Settings
from webui.workflows.handlers import CheckBounds, HandlerRef, check_handlers

# The import finds the check's own copy of the answer pipe (check_child's `stdout`), writes
# far more than the parent reads, then waits out every deadline of the child's own: only the
# parent's reading bound can stop it before its wall-clock bound.
FLOOD = """
import os, signal, sys
signal.signal(signal.SIGALRM, signal.SIG_IGN)
frame = sys._getframe()
while "stdout" not in frame.f_locals:
    frame = frame.f_back
chunk = b"x" * (1 << 20)
for _ in range(32):
    os.write(frame.f_locals["stdout"], chunk)
while True:
    signal.pause()
"""


def _project(root: Path, source: str) -> list[HandlerRef]:
    project(root, source)
    return [HandlerRef("run", "main.py:run", f"{root}/package.json:1: entrypoints[0].handler")]


def test_a_handler_import_flooding_the_answer_pipe_is_stopped_at_the_read_bound(tmp_path: Path) -> None:
    """The blocking check (publish, `projects add`, `structure`) read the child's whole
    stdout (`communicate`) for as long as the child lived: an import writing GBs to it filled
    the server's memory. The parent now reads at most the check's output bound, then kills."""
    refs = _project(tmp_path / "p", FLOOD)
    started = time.monotonic()
    found = check_handlers(tmp_path / "p", refs, CheckBounds(seconds=8))
    assert time.monotonic() - started < WAIT  # a hang guard
    assert len(found) == 1 and "importing them wrote more than the check reads" in found[0], found


# Reads every process environment its user may read, and says what it found in its error.
PEEK = """
import os
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                found += [v for v in f.read().split(b"\\0") if v.startswith(b"HOST_SERVER_TOKEN=")]
        except OSError:
            pass
raise ValueError(b" ".join(found).decode() or "nothing")
"""
TOKEN = "HOST_SERVER_TOKEN=tok-3f9a-not-for-projects"


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only root switches users: not root, the check runs as the caller, whose own process "
    "it cannot read (test_handler_check_private_parent)",
)
@pytest.mark.skipif(
    os.geteuid() == 0 and check_uid(Settings.model_construct()) is None,
    reason="this host maps no uid past the runs' range: the check then shares worker_user with runs "
    "(documented in webui/projects/handler_check.py), so there is no other user to keep it from",
)
def test_a_handler_import_under_root_cannot_read_a_host_stdio_servers_environment(tmp_path: Path) -> None:
    """Under root the check imports a draft's handlers as `worker_user`, the user the host's
    stdio MCP servers run as by default (`host_server_user` unset): the draft's author's
    code then reads those servers' /proc/<pid>/environ (their configured tokens) and says
    them in the check's problem, which the publish page shows. It must run as a user no
    other process of the server's runs as."""
    settings = Settings.model_construct()
    user = pwd.getpwnam(settings.resolved_host_server_user)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, user.pw_uid, user.pw_gid)
    launch = json.dumps({"HOME": str(home), TOKEN.split("=")[0]: TOKEN.split("=", 1)[1]})
    launcher = [sys.executable, "-I", "-m", "webui.host.unprivileged", str(user.pw_uid), str(user.pw_gid)]
    server = subprocess.Popen(
        [*launcher, str(home), "sleep", "60"],
        env={ENV_VARIABLE: launch, "PATH": os.environ["PATH"]},
    )
    try:
        deadline = time.monotonic() + WAIT
        while os.stat(f"/proc/{server.pid}").st_uid != user.pw_uid or _comm(server.pid) != "sleep":
            assert time.monotonic() < deadline
        refs = _project(tmp_path / "p", PEEK)
        found = check_handlers(tmp_path / "p", refs, check_bounds(settings))
    finally:
        server.kill()
        server.wait()
    assert len(found) == 1 and "ValueError: nothing" in found[0], found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# The check's child reads the command line of the process that started it (the CLI).
CMDLINE = """
import os
argv = open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode().split("\\0")
raise ValueError(argv[argv.index("--database-url") + 1])
"""
# The CLI as run, but its store SQLite (no PostgreSQL here): the URL stays on its command line.
CLI = """
import sys
import webui.cli.common as common
import webui.cli.projects as projects
real = common.open_store
projects.open_store = lambda settings: real(settings.model_copy(update={"database_url": None}))
from webui.cli import main
sys.exit(main())
"""
PASSWORD = "pg-s3cret-not-for-handlers"


def test_projects_add_hides_the_database_password_from_the_handlers_it_imports(tmp_path: Path) -> None:
    """`projects add` (and `publish`) now import the project's handlers in a child, which may
    read its parent's /proc/<pid>/cmdline whatever user it runs as: a password given in
    --database-url is overwritten there first, as `serve` does."""
    _project(tmp_path / "p", CMDLINE)
    url = f"postgresql://steam:{PASSWORD}@db.example.test:5432/steam"
    argv = [
        sys.executable,
        "-c",
        CLI,
        "projects",
        "add",
        str(tmp_path / "p"),
        "--data-dir",
        str(tmp_path / "d"),
    ]
    env = {**clean_env(), "STEAMHARNESS_HANDLER_CHECK_SECONDS": "20"}
    done = subprocess.run(
        [*argv, "--database-url", url], capture_output=True, text=True, env=env, timeout=WAIT
    )
    assert "ValueError: postgresql://steam:" in done.stderr, done.stderr
    assert PASSWORD not in done.stderr, done.stderr


# Makes a folder in each shared temporary folder, named by the test, and says where it could.
LITTER = """
import os
made = []
for place in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        os.mkdir(f"{place}/NAME")
        made.append(place)
    except OSError:
        pass
raise ValueError(" ".join(made) or "nowhere")
"""


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="private temporary folders need a mount namespace, which only root makes; not root, "
    "the check writes where its caller may",
)
def test_a_handler_import_under_root_leaves_nothing_in_the_hosts_temporary_folders(tmp_path: Path) -> None:
    """A run under root has temporary folders of its own (webui.runs.view); the check's child
    imports a draft's handlers in the host's: an import there leaves files (empty ones, any
    number: inodes) and folders that outlive the check, where the next check, whoever's
    draft it is, finds them."""
    name = f"steamharness-litter-{tmp_path.name}"
    refs = _project(tmp_path / "p", LITTER.replace("NAME", repr(name)[1:-1]))
    try:
        found = check_handlers(tmp_path / "p", refs, check_bounds(Settings.model_construct()))
    finally:
        left = [place for place in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(f"{place}/{name}")]
        for place in left:
            os.rmdir(f"{place}/{name}")
    assert len(found) == 1 and "ValueError: " in found[0], found  # it ran, in folders of its own
    assert left == []
