"""The server both fuzz modules attack: a real `steamharness serve` on a free loopback port
serving only examples/hello (registered and published through the CLI), so it starts in a
few seconds."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from tests.conftest import EXAMPLES
from tests.e2e.server import HELLO, LiveServer, free_port

# The fuzz runs in the full suite, next to everything else on a small machine: a start-up
# that is merely slow is not what these tests are about.
START_TIMEOUT = 120.0


def hello_server(tmp_path: Path, **env: str) -> LiveServer:
    projects = tmp_path / "projects"
    shutil.copytree(EXAMPLES / "hello", projects / "hello", ignore=shutil.ignore_patterns("__pycache__"))
    admin_key = secrets.token_urlsafe(32)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    server = LiveServer(
        data_dir=tmp_path / "data",
        projects=projects,
        port=free_port(),
        admin_key=admin_key,
        env={**base_env, "STEAMHARNESS_SERVER_ADMIN_KEY": admin_key, "PYTHONUNBUFFERED": "1", **env},
        start_timeout=START_TIMEOUT,
    )
    server.add_project(projects / "hello", HELLO)
    return server
