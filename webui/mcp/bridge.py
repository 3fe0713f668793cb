"""tools/call -> run -> result, and interaction <-> elicitation, for both protocol eras.

The bridge never executes workflow code: it validates arguments, resolves file params
(`webui.mcp.arguments`), asks the RunService for a run, and follows that run's updates to
the tool result. Arguments that fail (the schema, a file param) are a tool error result
(`isError`, SEP-1303) and start no run; an unknown tool is -32602. When the run waits for a
person, `webui.mcp.questions` delivers the stored Interaction through the best channel the
client has (inline elicitation, an `InputRequiredResult`, or the `interaction_required`
result).
A call that carries a progress token gets the workflow's progress and, while the run is not
finished, a keep-alive (webui.mcp.keepalive) at `progress_interval` seconds.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import DatabaseBusy, run_db
from webui.configs.model import ConfigSnapshot
from webui.configs.service import ConfigService
from webui.errors import (
    ConfigurationInvalid,
    ConfigurationNotFound,
    InvalidArguments,
    NotFound,
    StorageFull,
)
from webui.files.store import FileStore
from webui.interactions.service import InteractionService
from webui.mcp.arguments import resolve_files
from webui.mcp.binding import Binding, client_left, config_place
from webui.mcp.capabilities import (
    CAPABILITY_REQUIRED,
    capability_error,
    capability_message,
    capability_refusal,
    missing_capabilities,
)
from webui.mcp.keepalive import DEFAULT_INTERVAL_SECONDS, ProgressStream, describe_wait, keeping_alive
from webui.mcp.logs import CallLogs
from webui.mcp.questions import Questions
from webui.mcp.results import argument_error_result, error_result, final_result
from webui.mcp.tasks import (
    DEFAULT_POLL_INTERVAL_MS,
    DEFAULT_TASK_AFTER_SECONDS,
    TASKS_EXTENSION,
    TaskIds,
    Tasks,
    declares_tasks,
)
from webui.observability.tracing import TRACER
from webui.projects.limits import ProjectLimits
from webui.runs.handle import RunHandle
from webui.runs.request import RunRequest
from webui.runs.service import RunService
from webui.runs.types import RunLimits, RunRefused, RunUpdate
from webui.store import audit as audit_store
from webui.store.models import Run
from webui.store.statuses import FINAL_STATUSES
from webui.validation import clipped
from webui.workflows.project import Entrypoint
from webui.workflows.schema import check_arguments

log = logging.getLogger(__name__)

INTERNAL_ERROR = -32603
CLIENT_CANCELLED = "The MCP client cancelled the tool call."
CLIENT_LEFT = "The MCP client disconnected during the call."
TASK_NOT_DELIVERED = "The call became a task its client could not be told of."
# What a tool call answers: its result, an input round, or (a dict) an MCP task's CreateTaskResult.
CallResult = types.CallToolResult | types.InputRequiredResult | dict[str, Any]


def _invalid(message: str) -> MCPError:
    return MCPError(INVALID_PARAMS, message)


# What the call adds to its run's audit events (the rest they name already).
CALL_COLUMNS = ("target", "client_address", "user_agent")


def call_columns(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: fields[name] for name in CALL_COLUMNS}


class CallBridge:
    def __init__(
        self,
        *,
        runs: RunService,
        interactions: InteractionService,
        files: FileStore,
        audit: AuditLog,
        configs: ConfigService,
        limits: ProjectLimits | None = None,
        progress_interval: float = DEFAULT_INTERVAL_SECONDS,
        task_key: bytes | None = None,
        task_after: float = DEFAULT_TASK_AFTER_SECONDS,
        task_poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
    ) -> None:
        """`progress_interval`: seconds between keep-alive progress notifications (0: none).
        `task_key`: the key task ids are bound with (None: no MCP tasks); `task_after`: how
        long an "optional" tool's call is followed before it becomes a task (webui.mcp.tasks).
        `limits`: the projects' run limits, read before every call of a binding that resolved
        a target (HTTP); None: no project limits (stdio)."""
        self.runs = runs
        self.interactions = interactions
        self.files = files
        self.audit = audit
        self.configs = configs
        self.limits = limits
        self.progress_interval = progress_interval
        self.questions = Questions(runs=runs, interactions=interactions)
        self.task_after = task_after
        self.tasks = (
            Tasks(
                runs=runs,
                interactions=interactions,
                files=files,
                ids=TaskIds(task_key),
                poll_interval_ms=task_poll_interval_ms,
            )
            if task_key is not None
            else None
        )

    async def _audit(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        event: str,
        ep: Entrypoint,
        run_id: str | None,
        outcome: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        # Kept with the run's records while the database cannot take it (webui.runs.outcomes):
        # a locked or full database does not turn a finished run into a failed call.
        await self.runs.records.audit_event(event, **self._audit_fields(ctx, b, ep, run_id, outcome, details))

    @staticmethod
    def _audit_fields(
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        run_id: str | None,
        outcome: str,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        request = getattr(ctx, "request", None)
        client = getattr(request, "client", None)
        headers = getattr(request, "headers", None)
        agent = headers.get("user-agent") if headers is not None else None
        return dict(
            actor=b.actor,
            project_id=b.catalog.project.id,
            target=b.target,
            version=b.version,
            session_id=b.session_id,
            tool=ep.id,
            run_id=run_id,
            outcome=outcome,
            source="mcp",
            client_address=getattr(client, "host", None),
            user_agent=agent,
            details=details,
        )

    async def call(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, params: types.CallToolRequestParams
    ) -> CallResult:
        ep = b.catalog.entrypoint(params.name)
        if ep is None:
            raise _invalid(f"Unknown tool: {clipped(params.name)}")
        as_task = self.tasks is not None and ep.task != "never" and declares_tasks(ctx)
        missing = missing_capabilities(ctx, ep)
        needs_tasks = ep.task == "required" and not as_task
        if missing or needs_tasks:
            # Refused before any run: one audit event naming everything the client lacks,
            # nothing else (webui.mcp.capabilities).
            requires = [*missing, *([TASKS_EXTENSION] if needs_tasks else [])]
            await self._audit(
                ctx, b, AuditName.TOOL_FAILED, ep, None, CAPABILITY_REQUIRED, {"requires": requires}
            )
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                raise capability_error(ep, missing, (TASKS_EXTENSION,) if needs_tasks else ())
            if not needs_tasks:
                return error_result(None, ep, "failed", CAPABILITY_REQUIRED, capability_message(ep, missing))
            message = (
                f"The tool {ep.id} runs only as an MCP task: call it from a client that declares"
                " the tasks extension (protocol 2026-07-28)."
            )
            return error_result(None, ep, "failed", "task_required", message)
        try:
            return await self._call(ctx, b, ep, params, as_task)
        except DatabaseBusy as exc:
            raise MCPError(INTERNAL_ERROR, f"{exc.message} (the server's database is locked)") from None
        except StorageFull as exc:
            raise MCPError(INTERNAL_ERROR, exc.message, data={"code": exc.code}) from None

    async def _call(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        params: types.CallToolRequestParams,
        as_task: bool,
    ) -> CallResult:
        token = (params.meta or {}).get("progress_token")
        stream = ProgressStream(ctx.session.report_progress) if token is not None else None
        task_after = self.task_after if as_task else None
        if params.request_state:
            resumed = await self.questions.resume_from_state(b, ep, params)
            run = self.runs.handle(resumed.id)
            if as_task:  # the input rounds before the work are over: the work is a task
                if await self._already_task(resumed):
                    # A retry replayed: the task it already is (or its outcome), written once.
                    assert self.tasks is not None  # as_task
                    return await self.tasks.created(ctx, b, ep, resumed.id)
                return await self._became_task(ctx, b, ep, run)
        else:
            try:
                with TRACER.start_as_current_span("steamharness.preflight"):
                    # Checked in the checks' own threads, never in a database thread.
                    args = await check_arguments(
                        b.catalog.schemas[ep.id], params.arguments, tool=ep.id, account=b.account_id
                    )
                    prepared = await run_db(self._prepare, b, ep, args)
                worker_params, stored, limits, config = prepared
                run = await self._start(ctx, b, ep, worker_params, stored, limits, config)
            except InvalidArguments as exc:
                # A tool execution error (SEP-1303), not -32602: the model reads which argument
                # is wrong and corrects its call. Found before any run is created.
                await self._audit(ctx, b, AuditName.TOOL_FAILED, ep, None, exc.code)
                return argument_error_result(ep, exc.code, exc.message)
            except RunRefused as exc:
                await self._audit(ctx, b, AuditName.TOOL_FAILED, ep, None, exc.code)
                return error_result(None, ep, "failed", exc.code, exc.message)
            except ConfigurationInvalid as exc:
                # Field names only: problems may quote values.
                await self._audit(
                    ctx, b, AuditName.TOOL_FAILED, ep, None, exc.code, {"fields": sorted(exc.fields)}
                )
                return error_result(None, ep, "failed", exc.code, exc.message, fields=exc.fields)
            except ConfigurationNotFound as exc:
                await self._audit(ctx, b, AuditName.TOOL_FAILED, ep, None, exc.code)
                return error_result(None, ep, "failed", exc.code, exc.message)
            if as_task and ep.task == "required":
                return await self._became_task(ctx, b, ep, run)
        # Answers a client sent ahead, in its first call (2026-07-28): each taken by the
        # question its handler names with that key (`ctx.ask(key=...)`).
        ahead = {} if params.request_state else dict(params.input_responses or {})
        return await self._follow(ctx, b, ep, run, stream, task_after, ahead)

    async def _already_task(self, run: Run) -> bool:
        """Whether a resumed run needs no new task: it ended, or it already became one (on
        this replica, maybe with its audit not written yet; on any, its audit says so)."""
        if run.status in FINAL_STATUSES or self.runs.followed_as_task(run.id):
            return True
        return await run_db(
            audit_store.run_has_event, self.runs.engine, run_id=run.id, event=AuditName.TOOL_TASK_CREATED
        )

    async def _became_task(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, ep: Entrypoint, run: RunHandle
    ) -> dict[str, Any]:
        """The call ends with a task: the run goes on, followed by the client's tasks/get.
        A task the client never learns of (the audit or the read failed: a busy database)
        would run with nobody to follow or cancel it: its run is cancelled instead."""
        assert self.tasks is not None
        self.runs.mark_task(run.run_id)
        try:
            await self._audit(ctx, b, AuditName.TOOL_TASK_CREATED, ep, run.run_id, "task")
            await self.runs.note(
                run.run_id,
                "task",
                text="The MCP call became a task: its client follows the run with tasks/get.",
            )
            return await self.tasks.created(ctx, b, ep, run.run_id)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.runs.cancel_anywhere(run.run_id, reason=TASK_NOT_DELIVERED)
            raise

    async def _start(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        worker_params: dict[str, Any],
        stored: dict[str, Any],
        limits: RunLimits,
        config: ConfigSnapshot,
    ) -> RunHandle:
        return await self.runs.start(
            RunRequest(
                project=b.catalog.project,
                entrypoint=ep,
                params=worker_params,
                stored_params=stored,
                source="mcp",
                transport=b.transport,
                actor=b.actor,
                account_id=b.account_id,
                session_id=b.session_id,
                project_version=b.version,
                draft=b.target == "draft",
                env=dict(b.env),
                related=dict(b.related),
                relations=(
                    b.relations.with_config(lambda p: self.configs.snapshot(config_place(b, p)))
                    if b.relations is not None
                    else None
                ),
                limits=limits,
                config=config,
                # The call, on the run's own audit events (run.created, run.finished).
                call=call_columns(self._audit_fields(ctx, b, ep, None, "started")),
            )
        )

    # ------------------------------------------------------------------ following a run
    async def _follow(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        run: RunHandle,
        stream: ProgressStream | None,
        task_after: float | None = None,
        ahead: dict[str, Any] | None = None,
    ) -> CallResult:
        """Follow the run to this call's result (or, `task_after` set, to its task). The call
        ends, and its run is cancelled, when the client goes away: the SDK cancels this
        handler (a cancellation, a 2026 request's disconnect, the session ended), or, on a
        2025 session whose POST the client dropped, the HTTP edge says so (`client_left`)
        and the SDK does not."""
        left = client_left.get(None)
        result: CallResult | MCPError | None = None
        async with anyio.create_task_group() as tg:
            if left is not None:
                tg.start_soon(_cancel_when_set, left, tg.cancel_scope)
            result = await self._follow_updates(ctx, b, ep, run, stream, left, task_after, ahead)
            tg.cancel_scope.cancel()
        if result is None:  # the client left: nobody reads this
            return error_result(run.run_id, ep, "cancelled", "cancelled", CLIENT_LEFT)
        if isinstance(result, MCPError):  # raised out here: in the task group it is a group
            raise result
        return result

    async def _follow_updates(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        run: RunHandle,
        stream: ProgressStream | None,
        left: anyio.Event | None,
        task_after: float | None = None,
        ahead: dict[str, Any] | None = None,
    ) -> CallResult | MCPError:
        run_id = run.run_id
        keep_run = False
        finished = False
        logs = CallLogs(ctx, logger=ep.id)  # the run's ctx.log lines, as the client asked
        deadline = anyio.current_time() + task_after if task_after is not None else None

        def describe() -> str | None:
            last = stream.message if stream is not None else None
            state = self.runs.live_state(run_id)
            return describe_wait(state, title=ep.title or ep.id, last_message=last, base_url=b.base_url)

        try:
            async with (
                keeping_alive(stream, self.progress_interval, describe),
                run.updates() as updates,
            ):
                while True:
                    update: RunUpdate | None = None
                    if deadline is None:
                        update = await updates.get()
                    else:
                        with anyio.move_on_at(deadline):
                            update = await updates.get()
                    if update is None or (deadline is not None and update.kind == "progress"):
                        # Still going after `task_after`, or doing long work: a task now.
                        keep_run = True
                        return await self._became_task(ctx, b, ep, run)
                    if update.kind == "final":
                        finished = True  # the call's end is the run's `run.finished`
                        await logs.close()
                        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and (
                            refusal := capability_refusal(ep, update.error)
                        ):
                            return refusal
                        return final_result(
                            run_id,
                            ep,
                            update.status,
                            update.output,
                            update.error,
                            files=update.files,
                            local=b.catalog.file_mode == "local",
                            download_base=b.base_url,
                        )
                    if update.kind == "progress" and update.progress is not None and stream is not None:
                        await _progress(stream, update.progress)
                    elif update.kind == "log":
                        await logs.line(update.line)
                    elif update.kind == "waiting" and update.interaction is not None:
                        delivered = await self.questions.deliver(
                            ctx, b, ep, run_id, update.interaction, ahead=ahead
                        )
                        if delivered is not None:
                            keep_run = True  # the run waits for the answer, on the same runId
                            if isinstance(delivered, types.CallToolResult):
                                details = {"interactionId": update.interaction.id}
                                await self._audit(
                                    ctx, b, AuditName.INTERACTION_REQUIRED, ep, run_id, "waiting", details
                                )
                            return delivered
        except NotFound:
            finished = True
            return error_result(run_id, ep, "failed", "internal", "The run is no longer available.")
        finally:
            if not keep_run and not finished and run.live:
                # The client went away mid-call (cancelled, disconnected, session closed).
                reason = CLIENT_LEFT if left is not None and left.is_set() else CLIENT_CANCELLED
                with anyio.CancelScope(shield=True):
                    await run.cancel(reason)

    # ------------------------------------------------------------------ files
    def _prepare(
        self, b: Binding, ep: Entrypoint, args: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], RunLimits, ConfigSnapshot]:
        """What a run with these checked arguments is started with, in one thread hop
        (database reads, maybe a file import), in this order: file params resolved (else
        InvalidArguments), the project's limits (RunRefused), the configuration snapshot."""
        worker, stored = resolve_files(self.files, b, ep, args)
        limits = RunLimits()
        if b.resolved is not None and self.limits is not None:
            limits = self.limits.limits_for(b.resolved)
        return worker, stored, limits, self.configs.snapshot(config_place(b), b.config_name)


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _progress(stream: ProgressStream, progress: dict[str, Any]) -> None:
    """A workflow's `ctx.progress` report; one without a number for `done` is not sent."""
    done = progress.get("done")
    if not isinstance(done, int | float):
        return
    total = progress.get("total")
    message = progress.get("message")
    await stream.report(
        float(done),
        float(total) if isinstance(total, int | float) else None,
        str(message) if message is not None else None,
    )
