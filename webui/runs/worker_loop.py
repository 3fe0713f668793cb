"""The worker of one run: handed its run (`RunSpec`), then its messages served until its
outcome (webui.runs.messages lists them): output and logs become timeline entries, progress
and `ctx.log` lines go to the watchers, and each `rpc` is answered: questions
(webui.runs.questions), child runs (webui.runs.children), the stores (webui.runs.store_calls)."""

from __future__ import annotations

import logging
from typing import Any, TextIO

from webui.errors import SteamharnessError
from webui.observability.tracing import TRACER
from webui.runs.children import ChildRuns
from webui.runs.control import RunControl
from webui.runs.live import LiveRun
from webui.runs.messages import LOG_TEXT_LIMIT, RunSpec, reply
from webui.runs.pool import Worker, WorkerPool, WorkerProtocolError
from webui.runs.questions import RunQuestions
from webui.runs.store_calls import StoreCalls
from webui.runs.types import EXIT_WAIT_SECONDS, RunStatus, RunUpdate
from webui.store.models import utcnow

log = logging.getLogger(__name__)


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
        code = "output_too_large" if msg.get("code") == "output_too_large" else "handler_error"
        return RunStatus.FAILED, {"code": code, "message": str(msg.get("message", "The handler failed."))}
    return None


class WorkerLoop:
    def __init__(
        self,
        runs: RunControl,
        *,
        pool: WorkerPool,
        calls: StoreCalls,
        questions: RunQuestions,
        children: ChildRuns,
        echo: TextIO | None,
    ) -> None:
        self.runs = runs
        self.pool = pool
        self.calls = calls
        self.questions = questions
        self.children = children
        self.echo = echo

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
        if live.terminating is not None:  # cancelled while the fork was under way
            worker.kill()
        runs.start_timer(live)
        if live.created_running:
            runs.enter(live, RunStatus.RUNNING)  # recorded with the run's creation
        else:
            # Recorded while the worker already runs: the write is off the run's critical path.
            await runs.set_status(live, RunStatus.RUNNING, started_at=utcnow())
        # The handler's span is current while its messages are served: its questions and
        # child runs are its children.
        with TRACER.start_as_current_span("steamharness.handler"):
            while True:
                try:
                    msg = await worker.recv()
                except WorkerProtocolError as exc:
                    live.terminating = live.terminating or (
                        RunStatus.FAILED,
                        {"code": exc.code, "message": exc.message},
                    )
                    worker.kill()  # it may be blocked writing the rest; nothing it says counts now
                    break
                if msg is None:
                    break
                kind = msg.get("type")
                if kind == "output":
                    await self._record_output(live, str(msg.get("stream")), str(msg.get("text", "")))
                elif kind == "log":
                    await self._on_log(live, str(msg.get("text", "")))
                elif kind == "progress":
                    await self._on_progress(live, msg)
                elif kind == "rpc":
                    await self._on_rpc(live, worker, msg)
                elif (outcome := _outcome_of(msg)) is not None:
                    live.terminating = live.terminating or outcome
        runs.stop_timer(live)
        if live.terminating is None or live.terminating[0] != RunStatus.SUCCESS:
            # No clean outcome, or we killed it: know it is gone (and why) before finishing.
            status = await worker.wait_exit(EXIT_WAIT_SECONDS)
            if live.terminating is None:
                reason = status.describe() if status else "the worker process stopped unexpectedly"
                live.terminating = (
                    RunStatus.FAILED,
                    {"code": "worker_crashed", "message": f"The run crashed: {reason}."},
                )
        worker.close()

    async def _record_output(self, live: LiveRun, stream: str, text: str) -> None:
        if not text:
            return
        if self.echo is not None:
            # stdio: project logs and worker output go to stderr, never the protocol stream
            for line in text.splitlines():
                self.echo.write(f"[{live.run_id} {stream}] {line}\n")
            self.echo.flush()
        await self.runs.add_event(live, stream, text=text)

    async def _on_log(self, live: LiveRun, text: str) -> None:
        """A `ctx.log` line: to the watchers first (an MCP call sends it as a log message,
        webui.mcp.logs), from memory, then to the timeline."""
        if text and live.watchers:
            live.publish(RunUpdate("log", live.run_id, live.status, text=text[:LOG_TEXT_LIMIT]))
        await self._record_output(live, "log", text)

    async def _on_progress(self, live: LiveRun, msg: dict[str, Any]) -> None:
        data = {"done": msg.get("done"), "total": msg.get("total"), "message": msg.get("message")}
        # Watchers first: a progress notification need not wait for the timeline write.
        live.publish(RunUpdate("progress", live.run_id, live.status, progress=data))
        await self.runs.add_event(live, "progress", data=data)

    async def _on_rpc(self, live: LiveRun, worker: Worker, msg: dict[str, Any]) -> None:
        rid = int(msg["id"])
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
