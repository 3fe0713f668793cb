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
