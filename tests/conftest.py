from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TORTURE = FIXTURES / "torture"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
