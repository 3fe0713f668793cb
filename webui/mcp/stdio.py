"""`steamharness mcp DIR`: one project's entrypoints as MCP tools over stdio.

stdout carries JSON-RPC only: the SDK's stdio_server points fd 1 at stderr while it
serves, worker output is captured into the run log (and echoed to stderr), and stdout is
flushed inside the stdio context so nothing buffered reaches the wire after it.

A project that does not pass the check (its package.json, every entrypoint's handler
imported in a bounded child while the services open) is still served, so that its client
sees why instead of a closed connection: `initialize` works, tools/list lists the
entrypoints that did parse, and every tools/call answers an `isError` result naming every
problem, which are logged to stderr too. The project's code never runs."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import getpass
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from webui.auth.saved import saved_auth_env
from webui.blocking import run_db
from webui.errors import ConfigurationNotFound
from webui.mcp.binding import Binding, chosen_config, config_place, current_binding
from webui.mcp.catalog import Catalog, server_name
from webui.mcp.server import project_server
from webui.projects.handler_check import check_bounds
from webui.runs.env import worker_env
from webui.runs.related import LocalRelations
from webui.services import Services, open_services
from webui.settings import Settings
from webui.terminal_text import terminal_safe
from webui.workflows.handlers import check_handlers_async
from webui.workflows.project import Project, ProjectReading

log = logging.getLogger(__name__)


async def serve_stdio(
    settings: Settings, reading: ProjectReading, related: dict[str, str], config_name: str | None = None
) -> None:
    """`config_name`: the local configuration every call runs with (checked here, and again
    at each call); None: the local scope's active one at call time."""
    bounds = check_bounds(settings)
    if reading.project is None:  # its handlers are checked too, to tell every problem at once
        refs = await anyio.to_thread.run_sync(lambda: reading.handlers)  # reads package.json
        found = await check_handlers_async(reading.root, refs, bounds)
        await serve_problems(dataclasses.replace(reading, problems=(*reading.problems, *found)))
        return
    project = reading.project
    saved = saved_auth_env(settings.resolved_auth_dir)
    env = worker_env(project.root, os.environ, saved)
    # Checked before anything is served: each relation named by both projects.
    relations = LocalRelations.confirm(project, related, lambda root: worker_env(root, os.environ, saved))
    found: list[str] = []

    async def check() -> None:
        refs = await anyio.to_thread.run_sync(lambda: reading.handlers)  # reads package.json
        found.extend(await check_handlers_async(project.root, refs, bounds))

    async with contextlib.AsyncExitStack() as stack:
        opened: list[Services] = []
        try:
            # The handlers are imported in the bounded child while the services open.
            async with anyio.create_task_group() as checking:
                checking.start_soon(check)
                opened.append(await stack.enter_async_context(open_services(settings)))
        except BaseExceptionGroup as group:  # what failed, as if it had been awaited alone
            raise group.exceptions[0] if len(group.exceptions) == 1 else group from None
        svc = opened[0]
        svc.runs.tap_output(functools.partial(echo_output, sys.stderr))
        if found:
            await serve_problems(dataclasses.replace(reading, project=None, problems=tuple(found)))
            return
        binding = stdio_binding(project, env, relations, config_name)
        if config_name is not None:
            try:
                await run_db(svc.configs.show, config_place(binding), config_name)
            except ConfigurationNotFound as exc:
                raise ConfigurationNotFound(f"--config: {exc.message}") from None
        current_binding.set(binding)
        server = project_server(svc, settings)
        log.info("serving %s over stdio", server_name(project))
        await _serve(server)


def stdio_binding(
    project: Project, env: Mapping[str, str], relations: LocalRelations, config_name: str | None
) -> Binding:
    """What every request of a stdio server is bound to: the project's catalog (files named
    by path), the local operator, the worker environment `env`, the related projects."""
    return Binding(
        catalog=Catalog.build(project, file_mode="local"),
        principal=f"stdio:{project.id}",
        transport="stdio",
        actor=f"local:{getpass.getuser()}",
        env=env,
        related=relations.paths(),
        relations=relations,
        version=project.version,
        config_name=chosen_config(config_name, "--config"),
    )


def echo_output(out: TextIO, run_id: str, stream: str, text: str) -> None:
    """A run's output on stderr as it comes (`RunService.tap_output`): project logs and worker
    output go there, never to the protocol stream, terminal-safe (a run writes what a client
    sent it: escapes act on a terminal)."""
    for line in text.splitlines():
        out.write(f"[{run_id} {stream}] {terminal_safe(line)}\n")
    out.flush()


async def _serve(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        try:
            await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            sys.stdout.flush()


def problems_text(reading: ProjectReading) -> str:
    count = len(reading.problems)
    head = f"The workflow project in {reading.root} cannot run: {count} problem{'s' if count != 1 else ''}"
    fix = "fix them" if count != 1 else "fix it"
    lines = [f"{head} ({fix}, then restart this MCP server):", *(f"- {p}" for p in reading.problems)]
    return "\n".join(lines)


def problems_server(reading: ProjectReading) -> Server[Any]:
    """A server that can only tell the project's problems: the tools of the entrypoints that
    parsed are listed, and every call (whatever its name or arguments) answers an `isError`
    result naming every problem."""
    text = problems_text(reading)
    tools: list[types.Tool] = []
    if reading.entrypoints:
        shown = Project(
            id=reading.project_id or "",
            name=reading.name or reading.root.name,
            version=None,
            description="",
            root=reading.root,
            entrypoints=reading.entrypoints,
        )
        with contextlib.suppress(Exception):  # nothing to list is still an answer
            tools = Catalog.build(shown, file_mode="local").tools

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)

    name = f"workflow-{reading.project_id}" if reading.project_id else "steamharness-workflow"
    return Server(name, version="0.0.0", instructions=text, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_problems(reading: ProjectReading) -> None:
    """Serve `problems_server` until the client leaves; each problem logged to stderr first."""
    for problem in reading.problems:
        log.error("%s", problem)
    log.error("serving %s over stdio with no tool that runs: every call answers these problems", reading.root)
    await _serve(problems_server(reading))
