"""Parent side of the worker processes: the zygote, the socket children call back on, and
one `Worker` handle per run.

Each run gets a scratch directory of its own (its HOME and TMPDIR), created by the worker
under a directory only root can list, owned by the worker user, and removed once the
zygote reports the worker gone (by then everything the run started is dead too). Under a
per-run uid range (`WorkerUids`), the run's uid is taken when it is handed to a worker and
given back at that same report. With a `view` (`ViewSettings`), every worker that drops to
a user sees a filesystem of its own (webui.runs.view); where the zygote finds it cannot
build one, the pool says why once, as a warning."""

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

from webui.runs.isolation import WorkerUids, WorkerUser, sweep_shared_temp, zygote_env
from webui.runs.messages import MAX_FRAME_BYTES, RunSpec
from webui.runs.view import ViewConfig
from webui.runs.worker_conn import ExitStatus, Worker

log = logging.getLogger(__name__)

HELLO_TIMEOUT_SECONDS = 15.0
# A spare a run took is replaced when a run ends, or after this long at the latest.
REPLENISH_DELAY_SECONDS = 0.25
STREAM_LIMIT = MAX_FRAME_BYTES


@dataclass(frozen=True)
class ViewSettings:
    """A filesystem view per run: its tmpfs's size (`/tmp`, `/var/tmp`, `/dev/shm`
    together) and the host folders every run reads besides its own."""

    tmp_bytes: int
    read_paths: tuple[str, ...] = ()


class WorkerPool:
    """Owns the zygote. `spawn()` hands back a connected `Worker` in a few milliseconds once
    the pool is warm. Nothing starts before the first `spawn()` (or `start()`): then the
    zygote is started and the spares are forked."""

    def __init__(
        self,
        *,
        spares: int = 2,
        user: WorkerUser | None = None,
        uids: WorkerUids | None = None,
        view: ViewSettings | None = None,
    ) -> None:
        """`user`: who every run drops to; `uids`: a uid of its own per run instead; `view`:
        a filesystem view per run (only for runs that drop to a user: root could leave it)."""
        self.user = user
        self.uids = uids
        self.view = view if user is not None or uids is not None else None
        # Why the zygote could not build views (None: it can, or none was asked) ...
        self.view_problem: str | None = None
        # ... and whether the running one does.
        self.views_built = False
        self._uid_of: dict[int, int] = {}  # worker pid -> the per-run uid it holds
        self._viewed: set[int] = set()  # workers whose runs had a filesystem view
        self._dir: str | None = None
        self._scratch_root: str | None = None
        self._scratch: dict[int, str] = {}
        self._sock_path = ""
        self._server: asyncio.AbstractServer | None = None
        self._zygote: asyncio.subprocess.Process | None = None
        self._zygote_reader: asyncio.Task[None] | None = None
        self._hellos: dict[str, asyncio.Future[tuple[int, asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._exits: dict[int, asyncio.Future[ExitStatus]] = {}
        self._live: set[int] = set()
        self._lock = asyncio.Lock()
        self._spares_wanted = spares
        self._spares: list[Worker] = []
        self._forking = 0
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._unwatched: set[int] = set()
        self._unclaimed: set[asyncio.StreamWriter] = set()
        self._replenish_timer: asyncio.TimerHandle | None = None

    @property
    def zygote_pid(self) -> int | None:
        """The running zygote's pid; None before the first run (or while none is running)."""
        return self._zygote.pid if self._zygote is not None and self._zygote_alive() else None

    async def start(self) -> None:
        """Start the zygote and fork the spares now. Optional: the first `spawn()` does it
        (a process that never runs anything never pays for a zygote)."""
        await self._ensure_zygote()
        self._replenish()

    async def _listen(self) -> None:
        # The folders once: a start that failed past them is retried in the same ones (which
        # close() removes), never leaving the first try's behind.
        if self._dir is None:
            # A short private directory: Unix socket paths are limited to ~100 bytes.
            self._dir = tempfile.mkdtemp(prefix="shw-")
            os.chmod(self._dir, 0o700)
            self._sock_path = os.path.join(self._dir, "runs.sock")
            # Each worker mounts its view's root here, in its own mount namespace, and the
            # zygote the system part of every view there, in its own.
            os.mkdir(os.path.join(self._dir, "view"), 0o700)
            os.mkdir(os.path.join(self._dir, "system"), 0o700)
        if self._scratch_root is None:
            # Workers (the worker user) may enter their own directory here, never list others.
            # By its real path: a worker's view shows it there, and HOME must name it.
            self._scratch_root = os.path.realpath(tempfile.mkdtemp(prefix="shw-runs-"))
            os.chmod(self._scratch_root, 0o711 if self.user else 0o700)
        self._server = await asyncio.start_unix_server(
            self._on_connect, path=self._sock_path, limit=STREAM_LIMIT
        )

    def _view_argument(self) -> list[str]:
        if self.view is None:
            return []
        assert self._dir is not None
        config: ViewConfig = {
            "mountpoint": os.path.join(self._dir, "view"),
            "template": os.path.join(self._dir, "system"),
            "tmpBytes": self.view.tmp_bytes,
            "readPaths": list(self.view.read_paths),
        }
        return [json.dumps(config)]

    def _on_ready(self, msg: dict[str, Any]) -> None:
        self.views_built = "viewProblem" in msg and msg["viewProblem"] is None
        if self.view is None:
            return
        problem = msg.get("viewProblem")
        if problem is not None and problem != self.view_problem:
            log.warning(
                "workers cannot have a filesystem view of their own (%s): runs see the host's files,"
                " closed only by their modes (docs/server/runs.md, worker isolation)",
                problem,
            )
        self.view_problem = None if problem is None else str(problem)

    def _zygote_alive(self) -> bool:
        # Its stdout at EOF counts as dead before it is reaped: a restart must not wait for that.
        return (
            self._zygote is not None
            and self._zygote.returncode is None
            and self._zygote_reader is not None
            and not self._zygote_reader.done()
        )

    async def _ensure_zygote(self) -> asyncio.subprocess.Process:
        """The running zygote, started first if there is none (never used yet, or died).
        Under the lock: callers at the same moment start one zygote between them."""
        async with self._lock:
            if self._closing:
                raise RuntimeError("the worker pool is closed")
            if self._zygote is not None and self._zygote_alive():
                return self._zygote
            if self._server is None:
                await self._listen()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",  # never import from the current directory ahead of the stdlib and webui
                "-m",
                "webui.runs.zygote",
                self._sock_path,
                *self._view_argument(),
                cwd=self._dir,
                env=zygote_env(os.environ),  # workers inherit it: none of the server's secrets
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=None,  # diagnostics: the server's stderr (never the stdio MCP stream)
            )
            self._zygote = proc
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._zygote_reader = asyncio.create_task(self._read_zygote(proc, ready))
            try:
                await asyncio.wait_for(asyncio.shield(ready), HELLO_TIMEOUT_SECONDS)
            except BaseException:
                # Never left half started (failed, timed out, or its caller cancelled): the
                # caller gets the error, the next spawn a new try. Else a zygote that never
                # said ready would pass for the running one and every fork would wait in vain.
                ready.cancel()  # nobody awaits it any more: its reader must not fail it
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                raise
            return proc

    async def _read_zygote(self, proc: asyncio.subprocess.Process, ready: asyncio.Future[None]) -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if msg.get("type") == "ready" and not ready.done():
                self._on_ready(msg)
                ready.set_result(None)
            elif msg.get("type") == "exit":
                pid = int(msg["pid"])
                self._live.discard(pid)
                self._remove_scratch(self._scratch.pop(pid, None))
                self._give_back_uid(pid)
                if pid in self._unwatched:
                    self._unwatched.discard(pid)
                    self._exits.pop(pid, None)
                    continue
                fut = self._exits.setdefault(pid, asyncio.get_running_loop().create_future())
                if not fut.done():
                    fut.set_result(ExitStatus(code=msg.get("code"), signal=msg.get("signal")))
        if not ready.done():
            ready.set_exception(RuntimeError("the worker zygote exited during start-up"))
        if proc is not self._zygote:
            return  # one that failed to start, already replaced: it had no children
        # The zygote is gone: nobody will ever report these children's exits.
        for pid, fut in self._exits.items():
            if not fut.done() and pid in self._live:
                fut.set_result(ExitStatus(code=None, signal=None))
        # Forks asked of it never come; its spares have nobody to kill their strays or report
        # their exits: the next runs get workers of a new zygote.
        for hello in self._hellos.values():
            if not hello.done():
                hello.set_exception(RuntimeError("the worker zygote exited"))
        for spare in self._spares:
            spare.kill()
            spare.close()
            self._live.discard(spare.pid)
        self._spares.clear()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._unclaimed.add(writer)
        try:
            line = await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_SECONDS)
            hello = json.loads(line)
            if not isinstance(hello, dict):
                raise ValueError("the hello is not a JSON object")
            fut = self._hellos.pop(str(hello.get("token")), None)
        except (TimeoutError, ValueError, RecursionError, ConnectionError):
            fut = None
            hello = {}
        self._unclaimed.discard(writer)
        if fut is None or fut.done():
            writer.close()
            return
        fut.set_result((int(hello["pid"]), reader, writer))

    async def _fork(self) -> Worker:
        """A fresh child, forked from the zygote and connected, that has run nothing yet."""
        zygote = await self._ensure_zygote()
        assert zygote.stdin is not None
        token = secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, asyncio.StreamReader, asyncio.StreamWriter]] = loop.create_future()
        self._hellos[token] = fut
        try:
            zygote.stdin.write((json.dumps({"token": token}) + "\n").encode())
            await zygote.stdin.drain()
            pid, reader, writer = await asyncio.wait_for(fut, HELLO_TIMEOUT_SECONDS)
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                orphan_pid, _, orphan_writer = fut.result()
                orphan_writer.close()  # the child sees EOF and exits
                self._live.discard(orphan_pid)
            raise
        finally:
            self._hellos.pop(token, None)
        self._live.add(pid)
        self._exits.setdefault(pid, loop.create_future())
        return Worker(self, pid, reader, writer)

    def _replenish_soon(self) -> None:
        """Fork the missing spares after REPLENISH_DELAY_SECONDS (a run ending first does it
        sooner, `release`): not while the run that took a spare is starting."""
        if self._replenish_timer is None and not self._closing:
            loop = asyncio.get_running_loop()
            self._replenish_timer = loop.call_later(REPLENISH_DELAY_SECONDS, self._replenish)

    def _replenish(self) -> None:
        if self._replenish_timer is not None:
            self._replenish_timer.cancel()
            self._replenish_timer = None
        if self._closing:
            return
        while self._spares_wanted > len(self._spares) + self._forking:
            self._forking += 1
            task = asyncio.get_running_loop().create_task(self._fork_spare())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _fork_spare(self) -> None:
        try:
            worker = await self._fork()
        except Exception:
            log.warning("could not fork a spare worker", exc_info=True)
            return
        finally:
            self._forking -= 1
        if self._closing:
            worker.kill()
            worker.close()
            return
        self._spares.append(worker)

    def _give_back_uid(self, pid: int) -> None:
        """Once what the run left in the shared temporary folders is gone (the next run
        given the uid would own it); at once after a run in a filesystem view (it could
        write no shared folder: its /tmp, /var/tmp and /dev/shm went with it)."""
        uid = self._uid_of.pop(pid, None)
        viewed = pid in self._viewed
        self._viewed.discard(pid)
        if uid is None or self.uids is None:
            return
        uids = self.uids
        if viewed:
            uids.release(uid)
            return

        async def give_back() -> None:
            try:
                await asyncio.to_thread(sweep_shared_temp, uid)
            finally:
                uids.release(uid)

        task = asyncio.get_running_loop().create_task(give_back())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def spawn(self, spec: RunSpec) -> Worker:
        """Hand a run to a fresh worker: a spare forked ahead of time when there is one
        (so a run starts without waiting for a fork), else one forked now. The spare that
        replaces it is forked once a run ends (or shortly after, for runs that last), not
        while this one starts."""
        worker = self._spares.pop(0) if self._spares else await self._fork()
        self._replenish_soon()
        assert self._scratch_root is not None
        worker.scratch = os.path.join(self._scratch_root, f"{spec['runId']}-{secrets.token_hex(8)}")
        try:
            worker.user = self.uids.acquire() if self.uids is not None else self.user
        except RuntimeError:
            worker.kill()  # no uid to give it: it never runs anything
            worker.close()
            raise
        if worker.pid in self._live:  # else it died as a spare and never makes the dir
            self._scratch[worker.pid] = worker.scratch
            if self.uids is not None and worker.user is not None:
                self._uid_of[worker.pid] = worker.user.uid
                if worker.viewed:
                    self._viewed.add(worker.pid)
        elif self.uids is not None and worker.user is not None:
            self.uids.release(worker.user.uid)  # its exit was reported already
        spec = {**spec, "scratch": worker.scratch, "user": worker.user.to_spec() if worker.user else None}
        await worker.send({"type": "start", "spec": spec})
        return worker

    def _remove_scratch(self, path: str | None) -> None:
        if path is None:
            return
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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

    def release(self, pid: int) -> None:
        """Nobody will wait for this worker's exit status any more (its run is over: the
        spares it left short are forked now)."""
        fut = self._exits.get(pid)
        if fut is None or fut.done():
            self._exits.pop(pid, None)
        else:
            self._unwatched.add(pid)
        if self._replenish_timer is not None:
            self._replenish()

    def live_pids(self) -> set[int]:
        return set(self._live)

    def busy_pids(self) -> set[int]:
        """Workers that were handed a run (spares waiting for one are not)."""
        return self._live - {w.pid for w in self._spares}

    async def close(self) -> None:
        """Stop the zygote and every worker; nothing to do when no run ever started one."""
        self._closing = True
        if self._replenish_timer is not None:
            self._replenish_timer.cancel()
            self._replenish_timer = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        async with self._lock:  # a zygote start under way ends (bounded) before it is stopped
            pass
        for spare in self._spares:
            spare.kill()
            spare.close()
        self._spares.clear()
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
        # Scratch removals scheduled by the last exit reports.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
        for writer in list(self._unclaimed):
            writer.close()
        self._unclaimed.clear()
        for path in (self._dir, self._scratch_root):
            if path is not None:
                await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
