from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mcp.client.session as mcp_client_session
import pytest

from tests.helpers import WAIT
from tests.node_client import node_executable

pytest_plugins = ["tests.pg", "tests.knowledge_fixtures"]

# The Python SDK gives a server 10 s to answer `server/discover` when a client connects; a
# stdio server a test starts imports the whole stack first, which a loaded 2-core machine can
# take longer than that. The tests' own bound instead (a bound, not a speed check).
mcp_client_session.DISCOVER_TIMEOUT_SECONDS = WAIT

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TORTURE = FIXTURES / "torture"


# ------------------------------------------------------------ worker uids of this process
#
# As root, a server runs each run as a uid of its own from STEAMHARNESS_WORKER_UID_BASE on;
# uids are the machine's, so servers of two xdist workers (or of two test runs at once)
# handing out the same uids would sweep each other's leftovers in /tmp and find each other's
# runs where a test looks for its own. Every test process takes a block of its own, held by
# a lock for its lifetime, and names it in its environment, for in-process services and for
# the servers it starts (`server_env`). Blocks start above the server's default range.

UID_BASE_ENV = "STEAMHARNESS_WORKER_UID_BASE"
UID_BLOCK = 1024  # the server's default STEAMHARNESS_WORKER_UID_COUNT
UID_BLOCKS = 512
_uid_block_lock: list[int] = []  # the held lock's descriptor, kept open until the process ends


def _take_uid_block() -> None:
    folder = Path(tempfile.gettempdir()) / "steamharness-test-uid-blocks"
    folder.mkdir(mode=0o700, exist_ok=True)
    for block in range(1, UID_BLOCKS + 1):
        fd = os.open(folder / f"{block}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _uid_block_lock.append(fd)
        os.environ[UID_BASE_ENV] = str(1_500_000_000 + block * UID_BLOCK)
        return
    raise RuntimeError(f"every one of the {UID_BLOCKS} test worker uid blocks is taken")


def pytest_configure(config: pytest.Config) -> None:
    controller = bool(getattr(config.option, "numprocesses", 0)) and not hasattr(config, "workerinput")
    if os.geteuid() == 0 and not controller and not _uid_block_lock:
        _take_uid_block()


def server_env() -> dict[str, str]:
    """The environment for a server a test starts: this process's, without the developer's
    STEAMHARNESS_* settings, but with the worker uid block of this test process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    if UID_BASE_ENV in os.environ:
        env[UID_BASE_ENV] = os.environ[UID_BASE_ENV]
    return env


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _prepared_data_dirs() -> Iterator[None]:
    """The session's prepared data dirs (`tests/prepared.py`) are removed at its end."""
    from tests import prepared

    yield
    prepared.cleanup()


@pytest.fixture(scope="module")
def node() -> str:
    """Node with the TypeScript MCP SDK installed in tests/node, for the SDK client tests."""
    return node_executable()


# ---------------------------------------------------------------------------- markers
#
# Applied here from where a test lives and what it uses, so that no module has to remember
# them (registered in pyproject.toml; CONTRIBUTING.md says what each selects):
#   browser   tests/browser (headless Chromium)
#   node      the TypeScript SDK clients (`node`) and the MCP conformance suite (`node22`)
#   postgres  every test that gets a PostgreSQL database (a `postgresql` parameter, or the
#             cluster through `pg_cluster`, `postgresql_url`, `pg_url`, `pg_server`)
#   replicas  tests/replicas and tests/e2e/test_replicas.py
#   slow      what a developer's inner loop `-m "not slow"` leaves out: the groups above but
#             postgres, the live-server and process folders in SLOW_DIRS and the modules in
#             SLOW_MODULES (those whose tests took about a second or more each by
#             `--durations` on 2 cores: live servers, stdio servers, waits on purpose)

NODE_FIXTURES = ("node", "node22")
SLOW_GROUPS = ("browser", "node", "replicas")
SLOW_DIRS = ("tests/e2e/", "tests/mcp/", "tests/docs/")  # a live server, a stdio process, a site build
SLOW_MODULES = (
    "tests/security/test_fuzz_api.py",  # the fuzz: a minute or two each
    "tests/security/test_fuzz_mcp.py",
    "tests/store/test_db_cli.py",  # migrations through CLI processes and two servers
    "tests/host/test_host_service.py",  # stdio and HTTP MCP server processes
    "tests/web/test_host_pages.py",
    "tests/web/test_host_request_cards.py",
    "tests/test_processes.py",  # the fork server against real execs
    *(
        f"tests/security/test_{name}.py"  # a live server each, several with timed waits
        for name in (
            "body_timeouts",
            "caps",
            "config_export",
            "db_locked",
            "event_loop",
            "hostile_forms",
            "http_edges",
            "interaction_ownership",
            "json_depth",
            "limits",
            "publish_race",
            "question_expiry",
            "secret_redaction",
            "shutdown",
            "slots",
            "snapshot_isolation",
            "sse_caps",
            "stream_revocation",
            "unread_body_cap",
            "waiting_chains",
            "workers",
        )
    ),
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A test marked `exec_processes` (its module's fixtures included, set up with its first
    test) starts its `steamharness` processes by a real exec (tests/processes.py)."""
    from tests import processes

    processes.exec_only = processes.EXEC_ALWAYS or item.get_closest_marker("exec_processes") is not None
    yield


def _relative(item: pytest.Item) -> str:
    return item.path.relative_to(REPO).as_posix()


def _gets_postgresql(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgresql" in callspec.params.values():
        return True
    return "pg_cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = _relative(item)
        groups = set()
        if path.startswith("tests/browser/"):
            groups.add("browser")
        if any(name in getattr(item, "fixturenames", ()) for name in NODE_FIXTURES):
            groups.add("node")
        if _gets_postgresql(item):
            groups.add("postgres")
        if path.startswith("tests/replicas/") or path == "tests/e2e/test_replicas.py":
            groups.add("replicas")
        if groups & set(SLOW_GROUPS) or path in SLOW_MODULES or path.startswith(SLOW_DIRS):
            groups.add("slow")
        for name in sorted(groups):
            item.add_marker(name)
