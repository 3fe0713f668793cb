"""Parent side of the worker processes: the zygote, the socket children call back on, and
one `Worker` handle per run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

HELLO_TIMEOUT_SECONDS = 15.0
STREAM_LIMIT = 16 * 1024 * 1024


@dataclass(frozen=True)
class ExitStatus:
    code: int | None
    signal: int | None

    def describe(self) -> str:
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = str(self.signal)
            return f"the worker process was killed by {name}"
        return f"the worker process exited with code {self.code}"


class Worker:
    """One forked child running one run."""

    def __init__(
        self, pool: WorkerPool, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ):
        self.pool = pool
        self.pid = pid
        self._reader = reader
        self._writer = writer

    async def recv(self) -> dict[str, Any] | None:
        """The next message, or None once the child closed its side (done or dead)."""
        try:
            line = await self._reader.readline()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError):
            return None
        if not line:
            return None
        try:
            msg = json.loads(line)
        except ValueError:
            return None
        return msg if isinstance(msg, dict) else None

    async def send(self, msg: dict[str, Any]) -> None:
        try:
            self._writer.write((json.dumps(msg, separators=(",", ":")) + "\n").encode())
            await self._writer.drain()
        except (ConnectionError, RuntimeError):
            log.debug("worker %s gone before a reply could be sent", self.pid)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the run's whole process group (handler subprocesses included)."""
        for target in (lambda: os.killpg(self.pid, sig), lambda: os.kill(self.pid, sig)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                target()

    async def wait_exit(self, timeout: float) -> ExitStatus | None:
        return await self.pool.wait_exit(self.pid, timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


class WorkerPool:
    """Owns the zygote. `spawn()` hands back a connected `Worker` in a few milliseconds."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._sock_path = ""
        self._server: asyncio.AbstractServer | None = None
        self._zygote: asyncio.subprocess.Process | None = None
        self._zygote_reader: asyncio.Task[None] | None = None
        self._hellos: dict[str, asyncio.Future[tuple[int, asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._exits: dict[int, asyncio.Future[ExitStatus]] = {}
        self._live: set[int] = set()
        self._lock = asyncio.Lock()
        self._ready: asyncio.Future[None] | None = None

    async def start(self) -> None:
        # A short private directory: Unix socket paths are limited to ~100 bytes.
        self._dir = tempfile.mkdtemp(prefix="shw-")
        os.chmod(self._dir, 0o700)
        self._sock_path = os.path.join(self._dir, "runs.sock")
        self._server = await asyncio.start_unix_server(
            self._on_connect, path=self._sock_path, limit=STREAM_LIMIT
        )
        await self._ensure_zygote()

    async def _ensure_zygote(self) -> asyncio.subprocess.Process:
        async with self._lock:
            if self._zygote is not None and self._zygote.returncode is None:
                return self._zygote
            self._zygote = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "webui.runs.zygote",
                self._sock_path,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=None,  # diagnostics: the server's stderr (never the stdio MCP stream)
            )
            self._ready = asyncio.get_running_loop().create_future()
            self._zygote_reader = asyncio.create_task(self._read_zygote(self._zygote))
            await asyncio.wait_for(asyncio.shield(self._ready), HELLO_TIMEOUT_SECONDS)
            return self._zygote

    async def _read_zygote(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if msg.get("type") == "ready" and self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            elif msg.get("type") == "exit":
                pid = int(msg["pid"])
                self._live.discard(pid)
                fut = self._exits.setdefault(pid, asyncio.get_running_loop().create_future())
                if not fut.done():
                    fut.set_result(ExitStatus(code=msg.get("code"), signal=msg.get("signal")))
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError("the worker zygote exited during start-up"))
        # The zygote is gone: nobody will ever report these children's exits.
        for pid, fut in self._exits.items():
            if not fut.done() and pid in self._live:
                fut.set_result(ExitStatus(code=None, signal=None))

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_SECONDS)
            hello = json.loads(line)
            fut = self._hellos.pop(str(hello.get("token")), None)
        except (TimeoutError, ValueError, ConnectionError):
            fut = None
            hello = {}
        if fut is None or fut.done():
            writer.close()
            return
        fut.set_result((int(hello["pid"]), reader, writer))

    async def spawn(self, spec: dict[str, Any]) -> Worker:
        zygote = await self._ensure_zygote()
        assert zygote.stdin is not None
        token = secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, asyncio.StreamReader, asyncio.StreamWriter]] = loop.create_future()
        self._hellos[token] = fut
        try:
            zygote.stdin.write((json.dumps({"token": token, "spec": spec}) + "\n").encode())
            await zygote.stdin.drain()
            pid, reader, writer = await asyncio.wait_for(fut, HELLO_TIMEOUT_SECONDS)
        finally:
            self._hellos.pop(token, None)
        self._live.add(pid)
        self._exits.setdefault(pid, loop.create_future())
        return Worker(self, pid, reader, writer)

    async def wait_exit(self, pid: int, timeout: float) -> ExitStatus | None:
        fut = self._exits.get(pid)
        if fut is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return None
        finally:
            if fut.done():
                self._exits.pop(pid, None)

    def live_pids(self) -> set[int]:
        return set(self._live)

    async def close(self) -> None:
        for pid in list(self._live):
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
        if self._zygote is not None and self._zygote.returncode is None:
            assert self._zygote.stdin is not None
            self._zygote.stdin.close()
            try:
                await asyncio.wait_for(self._zygote.wait(), 5)
            except TimeoutError:
                self._zygote.kill()
                await self._zygote.wait()
        if self._zygote_reader is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._zygote_reader, 2)
        if self._server is not None:
            self._server.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
