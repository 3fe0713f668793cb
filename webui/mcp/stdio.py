"""`steamharness mcp DIR`: one project's entrypoints as MCP tools over stdio.

stdout carries JSON-RPC only: the SDK's stdio_server points fd 1 at stderr while it
serves, worker output is captured into the run log (and echoed to stderr), and stdout is
flushed inside the stdio context so nothing buffered reaches the wire after it."""

from __future__ import annotations

import getpass
import logging
import os
import sys

from mcp.server.stdio import stdio_server

from webui.auth.saved import saved_auth_env
from webui.blocking import run_db
from webui.errors import ConfigurationNotFound
from webui.mcp.binding import Binding, chosen_config, config_place, current_binding
from webui.mcp.bridge import CallBridge
from webui.mcp.catalog import Catalog, server_name
from webui.mcp.server import build_server
from webui.runs.env import worker_env
from webui.runs.related import LocalRelations
from webui.services import open_services, persistent_secret, request_state_key
from webui.settings import Settings
from webui.workflows.project import Project


async def serve_stdio(
    settings: Settings, project: Project, related: dict[str, str], config_name: str | None = None
) -> None:
    """`config_name`: the local configuration every call runs with (checked here, and again
    at each call); None: the local scope's active one at call time."""
    saved = saved_auth_env(settings.resolved_auth_dir)
    env = worker_env(project.root, os.environ, saved)
    # Checked before anything is served: each relation named by both projects.
    relations = LocalRelations.confirm(project, related, lambda root: worker_env(root, os.environ, saved))
    async with open_services(settings, echo=sys.stderr) as svc:
        catalog = Catalog.build(project, file_mode="local")
        binding = Binding(
            catalog=catalog,
            principal=f"stdio:{project.id}",
            transport="stdio",
            actor=f"local:{getpass.getuser()}",
            env=env,
            related=relations.paths(),
            relations=relations,
            version=project.version,
            config_name=chosen_config(config_name, "--config"),
        )
        if config_name is not None:
            try:
                await run_db(svc.configs.show, config_place(binding), config_name)
            except ConfigurationNotFound as exc:
                raise ConfigurationNotFound(f"--config: {exc.message}") from None
        current_binding.set(binding)
        bridge = CallBridge(
            runs=svc.runs,
            interactions=svc.interactions,
            files=svc.files,
            audit=svc.audit,
            configs=svc.configs,
            progress_interval=settings.progress_interval_seconds,
            task_key=persistent_secret(settings, "task-id.key"),
            task_after=settings.task_after_seconds,
            task_poll_interval_ms=settings.task_poll_interval_ms,
        )
        server = build_server(
            bridge=bridge,
            state_key=request_state_key(settings),
            state_ttl=settings.request_state_ttl_seconds,
        )
        logging.getLogger(__name__).info("serving %s over stdio", server_name(project))
        async with stdio_server() as (read_stream, write_stream):
            try:
                await server.run(read_stream, write_stream, server.create_initialization_options())
            finally:
                sys.stdout.flush()
