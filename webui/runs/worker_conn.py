"""The run service's side of one forked worker (webui.runs.pool hands them out): its
connection (`recv`: one JSON object a line, within MAX_FRAME_BYTES, else WorkerProtocolError;
`send`), its signals, and how it exited (`ExitStatus`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any, Protocol

from webui.runs.isolation import WorkerUser
from webui.runs.messages import MAX_FRAME_BYTES, Reply, Start

log = logging.getLogger(__name__)


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON: a worker message holding one is malformed (the
    worker's own encoder never writes them; a handler writing frames itself might)."""
    raise ValueError(f"{name} is not JSON")


class WorkerProtocolError(Exception):
    """The worker sent something the run service cannot take: the run fails with `code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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


class Pool(Protocol):
    """What a worker asks of the pool that forked it (webui.runs.pool.WorkerPool)."""

    @property
    def views_built(self) -> bool: ...
    async def wait_exit(self, pid: int, timeout: float) -> ExitStatus | None: ...
    def release(self, pid: int) -> None: ...


class Worker:
    """One forked child running one run."""

    def __init__(self, pool: Pool, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.pool = pool
        self.pid = pid
        self._reader = reader
        self._writer = writer
        self.scratch: str | None = None  # set once the worker has a run
        self.user: WorkerUser | None = None  # who its workflow code runs as (None: the server's user)
        # Whether its zygote gives its runs a filesystem view (their /tmp is their own).
        self.viewed = pool.views_built

    @property
    def uid(self) -> int:
        """The uid the run's workflow code (and every file it stages) has."""
        return self.user.uid if self.user else os.geteuid()

    async def recv(self) -> dict[str, Any] | None:
        """The next message, or None once the child closed its side (done or dead).
        Raises WorkerProtocolError for a message too large to read or not a JSON object."""
        try:
            line = await self._reader.readline()
        except ConnectionError:
            return None
        except ValueError:  # StreamReader: the line is longer than its limit
            raise WorkerProtocolError(
                "output_too_large",
                f"The worker sent a message over the {MAX_FRAME_BYTES // (1024 * 1024)} MB limit.",
            ) from None
        if not line.endswith(b"\n"):
            return None  # end of stream, possibly mid-message: the worker is gone
        try:
            msg = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # nested past the parser's stack: malformed too
            msg = None
        if not isinstance(msg, dict):
            raise WorkerProtocolError("handler_error", "The worker sent a malformed message.")
        return msg

    async def send(self, msg: Start | Reply) -> None:
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
        self.pool.release(self.pid)
