"""MCP tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663, 2026-07-28 era).

A tool call of a client that declares the extension may be answered with a task instead of
its result; the client then polls `tasks/get`, answers the run's questions with
`tasks/update` and stops it with `tasks/cancel`. A task *is* a persisted run: nothing is
stored for it beyond the run, so any replica answers for it and it survives a restart of
the replica that created it (while the run itself is driven by a live process).

Its id is `<runId>.<mac>`: an HMAC-SHA256 (128 bits) over the binding's principal (the
credential's fingerprint, the project and the target) and the run id, under a key derived
from the server's secret. So an id cannot be guessed, it works on every replica sharing the
secret, and an id of another caller (another key, project or target) reads exactly like an
unknown one (-32602). The run's owner is checked again on every request.

When a call becomes a task (`CallBridge`): an entrypoint declares `"task"` in package.json:
  - "never": always answered in the call (a question as an input round or elicitation);
  - "optional" (the default): the call is followed as usual for `task_after` seconds; a run
    that ends in that time is answered in the call, one that asks a question first gets an
    input round (the MRTR rounds before the work starts), one that reports progress or is
    still going at the end of it becomes a task. A retry carrying an input round's answer
    becomes a task at once (the rounds are over; the work starts);
  - "required": a task at once, once the run row is committed; a client that does not
    declare the extension gets -32021 naming it.
Clients that do not declare the extension never get a task.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from webui.blocking import run_db
from webui.errors import InteractionClosed, InteractionConflict, InvalidAnswer, NotFound
from webui.files.store import FileStore
from webui.interactions.client_requests import CLIENT_KINDS, UNDECLARED_CHANNEL, is_client_request
from webui.interactions.owner import OverrideRequired
from webui.interactions.service import InteractionService
from webui.mcp.binding import Binding, current_binding
from webui.mcp.capabilities import declares
from webui.mcp.questions import answer_of, answerable_by, input_request, keyed, party
from webui.mcp.results import final_result
from webui.runs.following import final_update, kept_update
from webui.runs.service import RunService
from webui.runs.types import RunUpdate
from webui.store import runs as run_store
from webui.store.models import Interaction, as_utc
from webui.workflows.project import Entrypoint

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
MAX_TASK_ID = 128
MAX_INPUT_RESPONSES = 64
DEFAULT_POLL_INTERVAL_MS = 1000
DEFAULT_TASK_AFTER_SECONDS = 2.0
# Run error codes that are no outcome of the tool itself: the task ends `failed` with a
# JSON-RPC error. Every other end (a handler error, a timeout, an expired question) is the
# tool's own: `completed` with its isError result, exactly what the call would have returned.
PROTOCOL_FAILURES = frozenset({"internal", "interrupted", "shutting_down", "worker_crashed"})
CANCELLED_BY_CLIENT = "The MCP client cancelled the task."
UNKNOWN_TASK = "Unknown task"


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client declared the tasks extension: in the request's own
    `_meta` client capabilities (2026-07-28 declares them per request). Earlier eras have no
    extension results on the wire, so they never get a task."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    meta = (ctx.params or {}).get("_meta")
    caps = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None
    if isinstance(caps, Mapping):
        extensions = caps.get("extensions")
        return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)
    declared = ctx.session.client_capabilities
    return bool(declared is not None and declared.extensions and TASKS_EXTENSION in declared.extensions)


def tasks_required(what: str) -> MCPError:
    """-32021, naming the capability the client must declare."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} needs a client that declares the tasks extension ({TASKS_EXTENSION})",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return as_utc(moment).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TaskIds:
    """Task ids bound to the caller: `<runId>.<mac>` (see the module docstring)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, principal: str, run_id: str) -> str:
        digest = hmac.new(self._key, f"{principal}\x00{run_id}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")

    def issue(self, principal: str, run_id: str) -> str:
        return f"{run_id}.{self._mac(principal, run_id)}"

    def run_of(self, principal: str, task_id: str) -> str | None:
        """The run a task id names, if it was issued to this principal."""
        if len(task_id) > MAX_TASK_ID:
            return None
        run_id, dot, mac = task_id.rpartition(".")
        # Compared as bytes: compare_digest refuses str with non-ASCII characters.
        if (
            not dot
            or not run_id
            or not hmac.compare_digest(mac.encode(), self._mac(principal, run_id).encode())
        ):
            return None
        return run_id


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")

    task_id: str = Field(alias="taskId", max_length=MAX_TASK_ID)


class TaskUpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(
        default_factory=dict, alias="inputResponses", max_length=MAX_INPUT_RESPONSES
    )


class Tasks:
    """The task view of runs, and the three task methods."""

    def __init__(
        self,
        *,
        runs: RunService,
        interactions: InteractionService,
        files: FileStore,
        ids: TaskIds,
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
    ) -> None:
        self.runs = runs
        self.interactions = interactions
        self.files = files
        self.ids = ids
        self.poll_interval_ms = poll_interval_ms

    # ------------------------------------------------------------------ the task's state
    async def created(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, ep: Entrypoint, run_id: str
    ) -> dict[str, Any]:
        """The `CreateTaskResult` of a call that became a task (its run row is committed):
        the task alone, without its result, error or questions (tasks/get has those)."""
        state = await self._state(ctx, b, ep, run_id)
        return {"resultType": "task", **state.task(detailed=False)}

    async def _state(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, ep: Entrypoint | None, run_id: str
    ) -> _TaskState:
        kept = self.runs.records.final(run_id)  # ended, its outcome not written yet
        view = await run_db(run_store.task_view, self.runs.engine, run_id=run_id)
        if (
            view is None
            or view.run.project_id != b.catalog.project.id
            or not party(b).owns(view.run.account_id)
        ):
            raise MCPError(INVALID_PARAMS, UNKNOWN_TASK)
        if ep is None:
            # A tool gone from the catalog since (a newer draft or version) still reads as the
            # run recorded it: an ended task's status and result never change.
            ep = b.catalog.entrypoint(view.run.entrypoint_id) or Entrypoint(
                id=view.run.entrypoint_id,
                title=view.run.entrypoint_title,
                description="",
                handler="",
                timeout_seconds=None,
                params=(),
            )
        final: RunUpdate | None = None
        if kept is not None:
            final = kept_update(run_id, kept.fields)
        elif view.run.status in run_store.FINAL_STATUSES:
            final = final_update(view.run, await run_db(self.files.outputs_of_run, run_id))
        return _TaskState(
            task_id=self.ids.issue(b.principal, run_id),
            view=view,
            final=final,
            ep=ep,
            local=b.catalog.file_mode == "local",
            download_base=b.base_url,
            poll_interval_ms=self.poll_interval_ms,
            answerable=lambda ia: answerable_by(ctx, ia),
        )

    # ------------------------------------------------------------------ the methods
    def _open(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> tuple[Binding, str]:
        """Checks in the order the extension gives them: the routing header names this task
        (-32020), the client declared the extension (-32021), the id is this caller's (-32602)."""
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        named = headers.get(MCP_NAME_HEADER) if headers is not None else None
        # Decoded as the SDK decodes it for tools/call (a `=?base64?...?=` value; a malformed
        # one never matches). A request without the header is served: FastMCP's task client
        # sends none on tasks/*, and its own server takes such requests too.
        if named is not None and decode_header_value(named) != params.task_id:
            raise MCPError(HEADER_MISMATCH, "The Mcp-Name header does not match the request's taskId")
        if not declares_tasks(ctx):
            raise tasks_required(ctx.method)
        b = current_binding.get()
        run_id = self.ids.run_of(b.principal, params.task_id)
        if run_id is None:
            raise MCPError(INVALID_PARAMS, UNKNOWN_TASK)
        return b, run_id

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        b, run_id = self._open(ctx, params)
        state = await self._state(ctx, b, None, run_id)
        if await self._decline_undeclared(ctx, b, state):
            state = await self._state(ctx, b, None, run_id)
        return {"resultType": "complete", **state.task(detailed=True)}

    async def _decline_undeclared(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, state: _TaskState
    ) -> bool:
        """A request only the MCP client answers (ctx.sample, ctx.roots) is never sent to a
        client that did not declare its capability: as on a call, it is refused (the
        handler's call raises, naming it) instead of waiting for an answer nobody can give.
        True when one was."""
        declined = False
        for ia in state.view.pending:
            if is_client_request(ia.kind) and not declares(ctx, CLIENT_KINDS[ia.kind]):
                with contextlib.suppress(InteractionClosed, InteractionConflict, NotFound, OverrideRequired):
                    await self.interactions.answer(
                        ia.id, action="decline", content=None, channel=UNDECLARED_CHANNEL, by=party(b)
                    )
                    declined = True
        return declined

    async def update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
        """Answers to the task's pending questions, each through `InteractionService.answer`
        like every other channel (the first valid answer wins). A question is answered under
        the key tasks/get gives it; any other key (never issued, already answered, a
        question this client cannot be sent) is ignored, as the extension says. The answers
        are checked whole first, as an input round's are: one that does not fit its question
        is -32602 naming its key, and none of them is recorded."""
        b, run_id = self._open(ctx, params)
        state = await self._state(ctx, b, None, run_id)
        outstanding = state.input_requests()
        answers: list[tuple[str, Interaction, str, Any]] = []
        problems: list[str] = []
        for key, raw in params.input_responses.items():
            ia = outstanding.get(key)
            if ia is None:
                continue
            try:
                action, content = answer_of(ia, raw)
                await self.interactions.check_answer(ia, action, content, account=b.account_id)
                answers.append((key, ia, action, content))
            except InvalidAnswer as exc:
                problems.append(f"{key}: {exc.message}")
        if problems:
            raise MCPError(INVALID_PARAMS, "; ".join(problems))
        for key, ia, action, content in answers:
            try:
                await self.interactions.answer(
                    ia.id, action=action, content=content, channel="mcp-task", by=party(b)
                )
            except (InteractionClosed, InteractionConflict, NotFound, OverrideRequired):
                pass  # answered elsewhere first, or the run ended: tasks/get tells the rest
            except InvalidAnswer as exc:  # refused on a rule beyond its schema
                problems.append(f"{key}: {exc.message}")
        if problems:
            raise MCPError(INVALID_PARAMS, "; ".join(problems))
        return {"resultType": "complete"}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        """Cancels the task's run; an ended task's cancel is acknowledged all the same."""
        b, run_id = self._open(ctx, params)
        state = await self._state(ctx, b, None, run_id)
        if state.final is None:
            await self.runs.cancel_anywhere(run_id, reason=CANCELLED_BY_CLIENT)
        return {"resultType": "complete"}


class _TaskState:
    """A run read back as a task."""

    def __init__(
        self,
        *,
        task_id: str,
        view: run_store.TaskView,
        final: RunUpdate | None,
        ep: Entrypoint,
        local: bool,
        poll_interval_ms: int,
        answerable: Callable[[Interaction], bool],
        download_base: str | None = None,
    ) -> None:
        self.task_id = task_id
        self.view = view
        self.final = final
        self.ep = ep
        self.local = local
        self.download_base = download_base  # links to created files (HTTP)
        self.poll_interval_ms = poll_interval_ms
        self.answerable = answerable

    def input_requests(self) -> dict[str, Interaction]:
        """The questions this request's client can be sent (as in an input round: a form to
        a client with form elicitation, sampling and roots to one that declared them), by
        their key on the task wire. A key names one request over the task's life (the
        extension's rule): the handler's key only for the first question of the task's own
        run to use it; a later one reusing it, and a child run's question (its keys are its
        own handler's), go by their unique id."""
        view = self.view
        by_id = view.reused_keys | {ia.id for ia in view.pending if ia.run_id != view.run.id}
        # Keyed over every pending question, then kept to what this poller may be sent: a
        # key names the same request whatever the capabilities a poll declares.
        asked = keyed(*view.pending, by_id=by_id)
        return {key: ia for key, ia in asked.items() if self.answerable(ia)}

    def task(self, *, detailed: bool) -> dict[str, Any]:
        run = self.view.run
        updated = [run.created_at, run.started_at, run.finished_at]
        if self.view.last_event is not None:
            updated.append(self.view.last_event.created_at)
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": "working",
            "createdAt": _iso(run.created_at),
            "lastUpdatedAt": _iso(max(as_utc(t) for t in updated if t is not None)),
            # A task lives as long as its run is kept: no expiry of its own.
            "ttlMs": None,
        }
        if self.final is not None:
            self._ended(task, detailed)
            return task
        progress = self.view.last_progress
        message = (progress.data or {}).get("message") if progress is not None else None
        if isinstance(message, str) and message:
            task["statusMessage"] = message
        task["pollIntervalMs"] = self.poll_interval_ms
        asked = self.input_requests()
        if asked:
            task["status"] = "input_required"
            if detailed:
                task["inputRequests"] = {
                    key: input_request(ia).model_dump(mode="json", by_alias=True, exclude_none=True)
                    for key, ia in asked.items()
                }
        elif any(not is_client_request(ia.kind) for ia in self.view.pending):
            task["statusMessage"] = (
                "The run waits for an answer this client cannot give here; answer it in the browser."
            )
        elif self.view.pending:  # a sampling or roots request: only an MCP client answers it
            task["statusMessage"] = (
                "The run waits for a request to its MCP client this client did not declare."
            )
        return task

    def _ended(self, task: dict[str, Any], detailed: bool) -> None:
        final = self.final
        assert final is not None
        error = final.error or {}
        if final.status == "cancelled":
            task["status"] = "cancelled"
            if error.get("message"):
                task["statusMessage"] = str(error["message"])
            return
        if final.status == "failed" and error.get("code") in PROTOCOL_FAILURES:
            task["status"] = "failed"
            message = str(error.get("message") or "The run failed.")
            task["statusMessage"] = message  # the diagnostic the extension asks of a failed task
            if detailed:
                task["error"] = {
                    "code": INTERNAL_ERROR,
                    "message": message,
                    "data": {"code": error.get("code")},
                }
            return
        task["status"] = "completed"
        if detailed:
            result = final_result(
                final.run_id,
                self.ep,
                final.status,
                final.output,
                final.error,
                files=final.files,
                local=self.local,
                download_base=self.download_base,
            )
            task["result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
