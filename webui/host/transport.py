"""How the host reaches a configured server: a stdio server's process (dropped to an
unprivileged user with a private home, when the server runs as root) or an HTTP client
whose configured headers go to the configured origin only."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from webui.host.config import ServerConfig, resolve_env, resolve_headers
from webui.host.connection import CALL_SLACK, HostError
from webui.host.unprivileged import ENV_VARIABLE
from webui.runs.isolation import WorkerUser


class Launcher:
    """Builds each client's transport. `run_as`: the user stdio servers run as (the server
    being root), each with a private home of its own; None runs them as the server's own
    user. Their stderr goes to `log_dir`. The homes live until `remove_homes`."""

    def __init__(self, *, log_dir: Path, expiry: float, run_as: WorkerUser | None = None) -> None:
        self.log_dir = log_dir
        self.expiry = expiry
        self.run_as = run_as
        self._homes: str | None = None

    def transport(self, server: ServerConfig, environ: Mapping[str, str]) -> Any:
        if server.transport == "stdio":
            assert server.command is not None
            env = resolve_env(server, environ)
            if self.run_as is None:
                params = StdioServerParameters(command=server.command, args=list(server.args), env=env)
            else:
                params = self._unprivileged(server, env)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            errlog = (self.log_dir / f"{server.id}.stderr.log").open("a", encoding="utf-8")
            return _closing_stdio(params, errlog)
        assert server.url is not None
        headers = resolve_headers(server, environ)
        return _closing_http(server.url, http_client(server.url, headers, self.expiry))

    async def remove_homes(self) -> None:
        """Call once every server process is gone."""
        if self._homes is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, self._homes, True)
            self._homes = None

    def _unprivileged(self, server: ServerConfig, env: dict[str, str]) -> StdioServerParameters:
        """The server's command behind the launcher that drops to `run_as`. Its home is a
        folder of its own that only it can enter (programs like npx keep caches there)."""
        assert self.run_as is not None and server.command is not None
        user = self.run_as
        if self._homes is None:
            self._homes = tempfile.mkdtemp(prefix="shh-homes-")
            os.chmod(self._homes, 0o711)  # enter your own, list nobody's
        home = os.path.join(self._homes, server.id)
        with contextlib.suppress(FileExistsError):
            os.mkdir(home, 0o700)
        os.chown(home, user.uid, user.gid, follow_symlinks=False)
        launch = {"HOME": home, "USER": user.name, "LOGNAME": user.name, **env}
        return StdioServerParameters(
            command=sys.executable,
            args=[
                "-I",  # none of the environment's PYTHON* variables, no user site, no cwd import
                "-m",
                "webui.host.unprivileged",
                str(user.uid),
                str(user.gid),
                home,
                server.command,
                *server.args,
            ],
            env={ENV_VARIABLE: json.dumps(launch)},
        )


@contextlib.asynccontextmanager
async def _closing_stdio(params: StdioServerParameters, errlog: Any) -> AsyncIterator[Any]:
    try:
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
    finally:
        errlog.close()


@contextlib.asynccontextmanager
async def _closing_http(url: str, client: httpx2.AsyncClient) -> AsyncIterator[Any]:
    """We pass our own HTTP client (headers, timeouts, redirect guard), so we close it."""
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def http_client(url: str, headers: dict[str, str], expiry: float) -> httpx2.AsyncClient:
    """Configured headers go to the configured origin only, and never over a downgrade."""
    base = urlsplit(url)
    origin = (base.scheme, base.hostname, base.port)

    async def guard(request: httpx2.Request) -> None:
        target = (request.url.scheme, request.url.host, request.url.port)
        if base.scheme == "https" and request.url.scheme != "https":
            raise HostError(f"refused a redirect from HTTPS to {request.url.scheme}")
        if target != origin:
            for name in headers:
                request.headers.pop(name, None)

    return httpx2.AsyncClient(
        headers=headers,
        follow_redirects=True,
        timeout=httpx2.Timeout(30, read=expiry + CALL_SLACK),
        event_hooks={"request": [guard]},
    )
