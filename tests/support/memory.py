"""The MCP server of one project in memory: what `steamharness mcp DIR` serves over stdio
(the real MCP server, call bridge, run service and worker pool, on a data dir of the test's),
reached by the MCP SDK's own client through its in-memory transport instead of a process's
pipes. Runs are real: each tool call starts a worker process as it does in production; what
is not exercised is the process around the server (its start, its stdout, its exit), which
the live stdio pass (tests/mcp/test_stdio_protocol.py) keeps."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client._memory import InMemoryTransport  # pyright: ignore[reportPrivateImportUsage]
from mcp.server.lowlevel import Server

from tests import prepared
from webui.auth.saved import saved_auth_env
from webui.mcp.binding import Binding, current_binding
from webui.mcp.server import project_server
from webui.mcp.stdio import stdio_binding
from webui.runs.env import worker_env
from webui.runs.related import LocalRelations
from webui.services import Services, open_services
from webui.settings import Settings
from webui.workflows.project import Project, load_project


@dataclass
class McpHarness:
    """One project's MCP server on open services. `client()` connects the SDK's client to it;
    `services` and `settings` are there to look at (the store, the run service) or to drive
    what a test needs besides the protocol."""

    project: Project
    settings: Settings
    services: Services
    binding: Binding
    server: Server[Any]

    @contextlib.asynccontextmanager
    async def client(self, mode: str = "auto", **kwargs: Any) -> AsyncIterator[Client]:
        """The SDK's `Client` connected in memory (`mode`: "legacy" for a 2025-11-25 session,
        "auto" negotiates 2026-07-28 as against the live server); `kwargs` go to `Client`
        (callbacks: elicitation, sampling, logging, …). The server serves `binding`: set in
        this context, it is what the server's tasks, started from here, carry."""
        token = current_binding.set(self.binding)
        try:
            # Through the transport, not `Client(server)`: its modern-era shortcut skips the
            # server's stream loop (no progress or log notifications), which stdio runs.
            transport = InMemoryTransport(self.server)
            async with Client(transport, mode=mode, **kwargs) as client:  # type: ignore[arg-type]
                yield client
        finally:
            current_binding.reset(token)


def settings_for(data_dir: Path, **overrides: Any) -> Settings:
    """Settings of a data dir that holds a migrated, empty store (the prepared `store` kind,
    copied: no migrations run per test); `overrides`: any other setting by its field name."""
    if not (data_dir / prepared.DB_FILE).exists():
        prepared.copy_prepared("store", data_dir)
    return Settings(data_dir=data_dir, **overrides)


@contextlib.asynccontextmanager
async def mcp_harness(
    folder: Path,
    data_dir: Path,
    *,
    config_name: str | None = None,
    related: Mapping[str, str] | None = None,
    **settings: Any,
) -> AsyncIterator[McpHarness]:
    """The MCP server `steamharness mcp FOLDER --data-dir DATA_DIR` serves (`config_name`:
    its `--config`, `related`: its `--related-project ALIAS=DIR`s, `settings`: any other
    setting by field name), on services opened for the block and closed when it ends."""
    chosen = settings_for(data_dir, **settings)
    project = load_project(folder)
    saved = saved_auth_env(chosen.resolved_auth_dir)
    env = worker_env(project.root, os.environ, saved)
    relations = LocalRelations.confirm(
        project, dict(related or {}), lambda root: worker_env(root, os.environ, saved)
    )
    async with open_services(chosen) as services:
        yield McpHarness(
            project=project,
            settings=chosen,
            services=services,
            binding=stdio_binding(project, env, relations, config_name),
            server=project_server(services, chosen),
        )
