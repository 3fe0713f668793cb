"""A small workflow project written by a test from its handlers' source, with a secret
configuration field (`token`), served by a real `steamharness serve`; and a bounded wait.
Shared by the attack-pass modules that each bring their own hostile handlers."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tests.e2e.server import LiveServer, running_server
from tests.e2e.test_mcp_tasks import POLL
from tests.helpers import WAIT

T = TypeVar("T")


def entry(
    name: str, params: list[dict[str, Any]] | None = None, *, task: str, timeout_seconds: float
) -> dict[str, Any]:
    """An entrypoint named after its handler `h.py:<name>`."""
    return {
        "id": name,
        "title": name,
        "description": f"The {name} handler.",
        "handler": f"h.py:{name}",
        "task": task,
        "timeoutSeconds": timeout_seconds,
        "params": params or [],
    }


def write_project(
    folder: Path, *, project_id: str, name: str, handlers: str, entrypoints: list[dict[str, Any]]
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "h.py").write_text(handlers, encoding="utf-8")
    package = {
        "id": project_id,
        "name": name,
        "version": "1.0.0",
        "projectType": "workflow",
        "description": f"The {name} attack project.",
        "configuration": {"fields": [{"name": "token", "type": "secret"}]},
        "entrypoints": entrypoints,
    }
    (folder / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
    return folder


@contextlib.contextmanager
def serving(
    base: Path, *, project_id: str, name: str, handlers: str, entrypoints: list[dict[str, Any]]
) -> Iterator[LiveServer]:
    """A live server in `base` with the project written and registered."""
    with running_server(base) as live:
        folder = write_project(
            live.projects / name, project_id=project_id, name=name, handlers=handlers, entrypoints=entrypoints
        )
        live.add_project(folder, project_id)
        yield live


def until(check: Callable[[], T | None], what: str) -> T:
    """`check()` polled until it gives something, bounded by WAIT."""
    deadline = time.monotonic() + WAIT
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(POLL)
