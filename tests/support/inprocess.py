"""The real HTTP app in this process: `create_app(settings)` (its lifespan: store, worker pool,
run service, MCP session manager and gateway, guard) served by uvicorn on a free loopback
port from a thread of the test process, instead of a `steamharness serve` process.

`InProcessServer` is a `LiveServer` (tests/e2e/server.py): the same data dir (a copy of the
prepared one), the same operator writes (`create_key`, `publish`, …), the same `base_url` and
`mcp_url`, so a test module moves by changing its fixture only. Its `log()` is what the
server's loggers wrote at WARNING and above while it ran (errors and their tracebacks, as
`serve` would print them; this process's own loggers write there too, which a test's
`"Traceback" not in log()` wants). What it does not have is what belongs to the process:
the log's INFO lines and JSON format, its signals, its exit code, the `serve`
command's start-up checks and uvicorn protocol of its own (the edge's header and body pacing,
`webui/edge/connections.py`). Tests of those keep a live server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from sse_starlette.sse import AppStatus

from tests import prepared
from tests.conftest import server_env
from tests.e2e.server import LiveServer, free_port
from tests.helpers import WAIT
from tests.support.waiting import eventually
from webui.app import create_app
from webui.cli.db import upgrade_all
from webui.settings import Settings
from webui.shutdown import GracefulServer

# The grace uvicorn gives open connections at stop (GracefulServer sets what is left of the
# app's `shutdown_grace_seconds` at shutdown).
STOP_GRACE = 5
# The loggers whose records `log()` keeps: the root (every webui logger) and uvicorn's, which
# does not propagate (an exception in the app is logged there).
CAPTURED = ("", "uvicorn")
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"  # serve's


class _Captured(logging.Handler):
    """The formatted records of WARNING and above, kept in memory for `log()`."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter(LOG_FORMAT))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class InProcessServer(LiveServer):
    """A `LiveServer` whose server is the app in a thread of this process (see the module)."""

    _thread: threading.Thread | None = None
    _uvicorn: uvicorn.Server | None = None
    _captured: _Captured | None = None

    def server_settings(self) -> Settings:
        """The settings `serve` would read from `env`: each STEAMHARNESS_* variable given, by
        its field name (the test process's own environment holds no other, tests/conftest.py)."""
        given = {
            var.removeprefix("STEAMHARNESS_").lower(): value
            for var, value in self.env.items()
            if var.startswith("STEAMHARNESS_")
        }
        given.pop("data_dir", None)
        given.pop("port", None)
        return Settings(data_dir=self.data_dir, port=self.port, **given)  # type: ignore[arg-type]  # as from the environment

    def start(self) -> None:
        assert self._thread is None
        settings = self.server_settings()
        upgrade_all(settings)  # as serve does: a store made elsewhere is brought up to date
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_keep_alive=int(settings.keep_alive_timeout_seconds),
            timeout_graceful_shutdown=STOP_GRACE,
            proxy_headers=False,  # the app applies X-Forwarded-* from settings.trusted_proxies only
        )
        # serve's server: at stop the app drains first (runs stopped and recorded, calls
        # answered, sessions ended), as on serve's SIGTERM (webui/shutdown.py).
        server = GracefulServer(config, app=config.app, grace=settings.shutdown_grace_seconds)
        thread = threading.Thread(target=self._serve, args=(server,), name=f"server-{self.port}", daemon=True)
        self._uvicorn, self._thread = server, thread
        self._captured = _Captured()
        for name in CAPTURED:
            logging.getLogger(name).addHandler(self._captured)
        thread.start()
        eventually(lambda: server.started or not thread.is_alive(), "the in-process server started")
        if not server.started:
            self._thread = self._uvicorn = None
            self._release_log()
            raise AssertionError("the in-process server did not start (its error is logged above)")

    def _release_log(self) -> None:
        """Stop capturing (what was captured stays readable)."""
        if self._captured is not None:
            for name in CAPTURED:
                logging.getLogger(name).removeHandler(self._captured)

    @staticmethod
    def _serve(server: uvicorn.Server) -> None:
        asyncio.run(server.serve())

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop accepting, let the app's lifespan end (runs stopped, sessions closed) and join
        the thread; `sig` is not sent anywhere (there is no process): 0 once stopped."""
        server, thread = self._uvicorn, self._thread
        if server is None or thread is None:
            return None
        self._uvicorn = self._thread = None
        server.should_exit = True
        thread.join(WAIT)
        assert not thread.is_alive(), "the in-process server did not stop"
        self._release_log()
        # The drain released every sse-starlette stream through this process-wide flag; the
        # next server of this process (or a TestClient app) starts with it down again.
        AppStatus.should_exit = False
        return 0

    def log(self) -> str:
        """What the server's loggers wrote at WARNING and above since it started (see the module)."""
        return "\n".join(self._captured.lines) if self._captured else ""


def make_in_process_server(tmp_path: Path, database_url: str | None = None, **env: str) -> InProcessServer:
    """`make_server`'s in-process twin: a server (not started) on a copy of the prepared
    `server` data dir (the example projects registered, the five published;
    `tests/prepared.py`), or on `database_url` with the same registry calls made;
    `env`: STEAMHARNESS_* settings, as a live server's environment would give them."""
    admin_key = secrets.token_urlsafe(32)
    if database_url is not None:
        env = {"STEAMHARNESS_DATABASE_URL": database_url, **env}
    server = InProcessServer(
        data_dir=tmp_path / "data",
        projects=tmp_path / "projects",
        port=free_port(),
        admin_key=admin_key,
        env={**server_env(), "STEAMHARNESS_SERVER_ADMIN_KEY": admin_key, **env},
        database_url=database_url,
    )
    if any(key in env for key in ("STEAMHARNESS_DATABASE_URL", "STEAMHARNESS_SHARED_DIR")):
        prepared.prepare_server(server.data_dir, prepared.copy_projects(server.projects), **env)
    else:
        prepared.copy_prepared("server", server.data_dir, server.projects)
    return server


@contextlib.contextmanager
def in_process_server(tmp_path: Path, database_url: str | None = None, **env: str) -> Iterator[LiveServer]:
    """`running_server`'s in-process twin: the server started for the block, stopped at its end."""
    with make_in_process_server(tmp_path, database_url, **env).running() as server:
        yield server
