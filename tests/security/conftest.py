"""The security modules that drive Chromium (test_hostile_forms) share the browser tests'
per-process driver (tests/browser/conftest.py): its event loop is marked running around
each of their tests, as it is around a browser test, and unmarked after."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from tests.browser.conftest import DRIVER


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    started = item.config.stash.get(DRIVER, None)
    if started is not None and "driver" in getattr(item, "fixturenames", ()):
        asyncio._set_running_loop(started.loop)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        if "driver" in getattr(item, "fixturenames", ()):
            asyncio._set_running_loop(None)
