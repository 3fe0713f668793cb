from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node_client import node_executable

pytest_plugins = ["tests.pg"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TORTURE = FIXTURES / "torture"


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
# them (registered in pyproject.toml; the README's testing section says what each selects):
#   browser   tests/browser (headless Chromium)
#   node      the TypeScript SDK clients (`node`) and the MCP conformance suite (`node22`)
#   postgres  every test that gets a PostgreSQL database (a `postgresql` parameter, or the
#             cluster through `pg_cluster`, `postgresql_url`, `pg_url`, `pg_server`)
#   replicas  tests/replicas and tests/e2e/test_replicas.py
#   slow      what a developer's inner loop `-m "not slow"` leaves out: the groups above but
#             postgres, and the modules in SLOW_MODULES (the longest by `--durations`)

NODE_FIXTURES = ("node", "node22")
SLOW_GROUPS = ("browser", "node", "replicas")
SLOW_MODULES = (
    "tests/security/test_fuzz_api.py",
    "tests/security/test_fuzz_mcp.py",
)


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
        if groups & set(SLOW_GROUPS) or path in SLOW_MODULES:
            groups.add("slow")
        for name in sorted(groups):
            item.add_marker(name)
