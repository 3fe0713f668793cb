"""The worker of one run: handed its run (`RunSpec`), then its messages served until its
outcome (webui.runs.messages lists them): output and logs become timeline entries, progress,
`ctx.log` lines and the handler's stdout lines go to the watchers (`WatchedLines`), and each
`rpc` is answered: questions (webui.runs.questions), child runs (webui.runs.children), the
stores (webui.runs.store_calls)."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

from webui.configs.model import ConfigSnapshot
from webui.configs.redaction import Redaction
from webui.configs.secrets import PREFIX as SEALED_PREFIX
from webui.errors import SteamharnessError
from webui.observability.tracing import TRACER
from webui.runs.children import ChildRuns
from webui.runs.control import LoopControl
from webui.runs.live import LiveRun
from webui.runs.messages import (
    DEFAULT_LOG_LEVEL,
    LOG_LEVELS,
    PROGRESS_MESSAGE_LIMIT,
    RunSpec,
    cut_note,
    reply,
)
from webui.runs.pool import WorkerPool
from webui.runs.questions import RunQuestions
from webui.runs.store_calls import StoreCalls
from webui.runs.types import EXIT_WAIT_SECONDS, LogLine, RunStatus, RunUpdate
from webui.runs.worker_conn import Worker, WorkerProtocolError
from webui.store.models import utcnow
from webui.workflows.project import CLIENT_CAPABILITIES

log = logging.getLogger(__name__)


# At most this much of one log line is handed to the watchers (the timeline keeps it whole):
# an MCP client is sent at most webui.mcp.logs.MESSAGE_LIMIT characters of it, fewer.
WATCHED_LINE_LIMIT = 16 * 1024
# A worker message's stdout lines handed to the watchers one by one; the rest of them only
# counted (on the last one handed): an MCP call sends at most
# webui.mcp.logs.MAX_MESSAGES_PER_CALL lines, fewer, so none it would send is left out.
WATCHED_LINES_PER_MESSAGE = 200


# Reads a run's output as it comes, before it is recorded: (run id, stream, text), where the
# stream is `stdout`, `stderr` or `log`. It must not block (it runs on the event loop).
OutputTap = Callable[[str, str, str], None]


def log_level(value: Any) -> str:
    """A `log` message's level: a worker may send the message without its Context, so an
    unknown one is read as the default rather than trusted."""
    return value if isinstance(value, str) and value in LOG_LEVELS else DEFAULT_LOG_LEVEL


def _secrets(config: ConfigSnapshot | None) -> list[str]:
    """The secret values the run started with: those recorded sealed."""
    if config is None:
        return []
    return [
        value
        for name, value in config.values.items()
        if isinstance(value, str)
        and isinstance(stored := config.stored.get(name), str)
        and stored.startswith(SEALED_PREFIX)
    ]


class WatchedLines:
    """What the run's watchers get of its log: `ctx.log` lines, and the handler's stdout as
    lines (its chunks end anywhere: the line not ended yet is kept, its start only, until it
    ends or the run does). Log lines hide the run's configuration secrets from every viewer,
    the run's own account too (webui.configs.redaction), so these do as well. stderr is not
    handed on: tracebacks and paths are the run page's, never a caller's (SPEC R-RUN-4)."""

    def __init__(self, live: LiveRun) -> None:
        self.live = live
        self._redaction: Redaction | None = None
        self._partial = ""
        self._partial_cut = 0

    def log(self, text: str, level: str) -> None:
        if text and self.live.watchers:
            cut = max(len(text) - WATCHED_LINE_LIMIT, 0)
            self._publish([(text[:WATCHED_LINE_LIMIT], cut)], level=level, stream="log")

    def stdout(self, chunk: str) -> None:
        end = chunk.rfind("\n")
        if end < 0:
            self._extend(chunk)
            return
        ended: list[tuple[str, int]] = []
        if self.live.watchers:
            first, *rest = chunk[:end].split("\n")
            self._extend(first)
            ended.append(self._take())
            ended.extend((line[:WATCHED_LINE_LIMIT], max(len(line) - WATCHED_LINE_LIMIT, 0)) for line in rest)
        self._partial, self._partial_cut = "", 0
        self._extend(chunk[end + 1 :])
        self._publish_stdout(ended)

    def flush(self) -> None:
        """The run's messages are over: its last stdout line, if it did not end."""
        if self.live.watchers:
            self._publish_stdout([self._take()])

    def _extend(self, text: str) -> None:
        room = WATCHED_LINE_LIMIT - len(self._partial)
        self._partial += text[:room]
        self._partial_cut += max(len(text) - room, 0)

    def _take(self) -> tuple[str, int]:
        taken = (self._partial, self._partial_cut)
        self._partial, self._partial_cut = "", 0
        return taken

    def _publish_stdout(self, lines: list[tuple[str, int]]) -> None:
        # `print()`'s blank lines say nothing to a client; a CRLF line ends like the others.
        lines = [(text.removesuffix("\r"), cut) for text, cut in lines]
        lines = [(text, cut) for text, cut in lines if text.strip() or cut]
        self._publish(lines, level=DEFAULT_LOG_LEVEL, stream="stdout")

    def _publish(self, lines: list[tuple[str, int]], *, level: str, stream: str) -> None:
        handed, counted = lines[:WATCHED_LINES_PER_MESSAGE], len(lines) - WATCHED_LINES_PER_MESSAGE
        live = self.live
        for i, (text, cut) in enumerate(handed):
            more = counted if i == len(handed) - 1 and counted > 0 else 0
            line = LogLine(self.redact(text), level=level, stream=stream, cut=cut, more=more)
            live.publish(RunUpdate("log", live.run_id, live.status, line=line))

    def redact(self, text: str) -> str:
        return self._redactor().text(text)

    def redact_head(self, text: str, limit: int) -> str:
        """`text`'s first `limit` characters, redacted as if the whole were (Redaction.head)."""
        return self._redactor().head(text, limit)

    def _redactor(self) -> Redaction:
        if self._redaction is None:
            self._redaction = Redaction(_secrets(self.live.request.config))
        return self._redaction


def _number(value: Any) -> float | int | None:
    """A progress figure: a finite number, else none."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _outcome_of(msg: dict[str, Any]) -> tuple[RunStatus, dict[str, Any]] | None:
    """A worker's outcome message (`done`, `failed`, `error`) as (status, detail)."""
    kind = msg.get("type")
    if kind == "done":
        return RunStatus.SUCCESS, {"output": msg.get("output")}
    if kind == "failed":
        error = {
            "code": "business_error",
            "errCode": msg.get("errCode"),
            "message": str(msg.get("message", "")),
        }
        return RunStatus.FAILED, error
    if kind == "error":
        message = str(msg.get("message", "The handler failed."))
        requires = msg.get("requires")
        if (
            msg.get("code") == "capability_required"
            and isinstance(requires, list)
            and requires
            and all(r in CLIENT_CAPABILITIES for r in requires)
        ):
            # The handler's ctx.sample / ctx.roots found the capability undeclared and let it
            # escape: the call answers as for a tool requiring it (webui.mcp.capabilities).
            named = list(dict.fromkeys(requires))  # each once: a forged frame may repeat them
            return RunStatus.FAILED, {"code": "capability_required", "message": message, "requires": named}
        code = "output_too_large" if msg.get("code") == "output_too_large" else "handler_error"
        return RunStatus.FAILED, {"code": code, "message": message}
    return None


class WorkerLoop:
    def __init__(
        self,
        runs: LoopControl,
        *,
        pool: WorkerPool,
        calls: StoreCalls,
        questions: RunQuestions,
        children: ChildRuns,
    ) -> None:
        self.runs = runs
        self.pool = pool
        self.calls = calls
        self.questions = questions
        self.children = children
        # Who else reads every run's output as it comes (`tap`): e.g. stdio's echo to stderr.
        self.taps: list[OutputTap] = []

    def _spec(self, live: LiveRun) -> RunSpec:
        req = live.request
        return {
            "runId": live.run_id,
            "entrypointId": req.entrypoint.id,
            "params": req.params,
            "root": str(req.project.root),
            "handler": req.entrypoint.handler,
            # A worker stages ctx.files.create in its scratch dir; the server copies it into
            # the created-files folder (a worker user cannot reach it).
            "fileCreateDir": None,
            "env": req.env,
            "related": req.related,
            "relatedIds": req.relations.ids() if req.relations is not None else {},
            "config": req.config.values if req.config else {},
        }

    async def run(self, live: LiveRun) -> None:
        """Hand the run to a worker and serve its messages until it is done."""
        runs = self.runs
        with TRACER.start_as_current_span("steamharness.worker.start"):
            worker = await self.pool.spawn(self._spec(live))
        live.worker = worker
        if live.concluded:  # cancelled while the fork was under way
            worker.kill()
        runs.clock.start(live)
        if live.place.created_running:
            runs.enter(live, RunStatus.RUNNING)  # recorded with the run's creation
        else:
            # Recorded while the worker already runs: the write is off the run's critical path.
            await runs.set_status(live, RunStatus.RUNNING, started_at=utcnow())
        lines = WatchedLines(live)
        # The handler's span is current while its messages are served: its questions and
        # child runs are its children.
        with TRACER.start_as_current_span("steamharness.handler"):
            while True:
                try:
                    msg = await worker.recv()
                except WorkerProtocolError as exc:
                    live.conclude(RunStatus.FAILED, {"code": exc.code, "message": exc.message})
                    worker.kill()  # it may be blocked writing the rest; nothing it says counts now
                    break
                if msg is None:
                    break
                kind = msg.get("type")
                if kind == "output":
                    stream, text = str(msg.get("stream")), str(msg.get("text", ""))
                    if stream == "stdout":
                        lines.stdout(text)  # watchers first, from memory
                    await self._record_output(live, stream, text)
                elif kind == "log":
                    await self._on_log(live, lines, str(msg.get("text", "")), log_level(msg.get("level")))
                elif kind == "progress":
                    await self._on_progress(live, lines, msg)
                elif kind == "rpc":
                    rid = msg.get("id")
                    if not isinstance(rid, int) or isinstance(rid, bool):
                        # No request to answer: a frame only hostile code writes. As for any
                        # malformed message, the run fails and its worker is killed.
                        malformed = {
                            "code": "handler_error",
                            "message": "The worker sent a malformed message.",
                        }
                        live.conclude(RunStatus.FAILED, malformed)
                        worker.kill()
                        break
                    await self._on_rpc(live, worker, rid, msg)
                elif (outcome := _outcome_of(msg)) is not None:
                    live.conclude(*outcome)
            lines.flush()
        runs.clock.stop(live)
        if live.conclusion is None or live.conclusion[0] != RunStatus.SUCCESS:
            # No clean outcome, or we killed it: know it is gone (and why) before finishing.
            status = await worker.wait_exit(EXIT_WAIT_SECONDS)
            reason = status.describe() if status else "the worker process stopped unexpectedly"
            live.conclude(
                RunStatus.FAILED, {"code": "worker_crashed", "message": f"The run crashed: {reason}."}
            )
        worker.close()

    async def _record_output(
        self, live: LiveRun, stream: str, text: str, data: dict[str, Any] | None = None
    ) -> None:
        if not text:
            return
        for tap in self.taps:
            tap(live.run_id, stream, text)
        await self.runs.add_event(live, stream, text=text, data=data)

    async def _on_log(self, live: LiveRun, lines: WatchedLines, text: str, level: str) -> None:
        """A `ctx.log` line: to the watchers first (an MCP call sends it as a log message,
        webui.mcp.logs), from memory, then to the timeline with its level."""
        lines.log(text, level)
        await self._record_output(live, "log", text, {"level": level})

    async def _on_progress(self, live: LiveRun, lines: WatchedLines, msg: dict[str, Any]) -> None:
        # Whatever the worker wrote: numbers or nothing, and a message cut to its limit with
        # the run's secrets redacted as if from the whole of it, so none straddling the cut
        # leaves its start (it reaches MCP clients and every task poll's statusMessage).
        message = msg.get("message")
        if message is not None:
            text = str(message)
            message = lines.redact_head(text, PROGRESS_MESSAGE_LIMIT)
            if len(text) > PROGRESS_MESSAGE_LIMIT:
                message += cut_note(len(text) - PROGRESS_MESSAGE_LIMIT)
        data = {"done": _number(msg.get("done")), "total": _number(msg.get("total")), "message": message}
        # Watchers first: a progress notification need not wait for the timeline write.
        live.publish(RunUpdate("progress", live.run_id, live.status, progress=data))
        await self.runs.add_event(live, "progress", data=data)

    async def _on_rpc(self, live: LiveRun, worker: Worker, rid: int, msg: dict[str, Any]) -> None:
        op = str(msg.get("op"))
        args = msg.get("args") or {}
        try:
            if op in ("ask", "approve", "sample", "roots", "together"):
                await self.questions.open(live, rid, op, args)
                return
            if op == "related.run":
                await self.children.start(live, worker, rid, args)
                return
            if op == "files.create":
                result = await self.runs.write(live, self.calls.create_file, live, worker, args)
            elif self.calls.is_knowledge(op):
                result = await self.calls.answer_knowledge(
                    live, op, args, functools.partial(self.runs.write, live)
                )
            else:
                result = await self.runs.write(live, self.calls.serve, live, op, args)
        except SteamharnessError as exc:
            await worker.send(reply(rid, error=exc.message))
            return
        except Exception:
            log.exception("run %s: rpc %s failed", live.run_id, op)
            await worker.send(reply(rid, error=f"{op} failed"))
            return
        await worker.send(reply(rid, result=result))
