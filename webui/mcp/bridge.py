"""tools/call -> run -> result, and interaction <-> elicitation, for both protocol eras.

The bridge never executes workflow code: it validates arguments, resolves file params,
asks the RunService for a run, and follows that run's updates. When the run waits for a
person it delivers the stored Interaction through the best channel the client has:
  - 2025-era sessions with form elicitation: inline `elicitation/create` on this call;
  - 2026-07-28: an `InputRequiredResult` whose (sealed) state names the run and question;
  - otherwise, or when the form cannot be an MCP form: the `interaction_required` result.
A call that carries a progress token gets the workflow's progress and, while the run is not
finished, a keep-alive (webui.mcp.keepalive) at `progress_interval` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from webui.audit.log import AuditLog
from webui.blocking import DatabaseBusy, run_db
from webui.configs.places import account_place, local_place_of
from webui.configs.service import ConfigPlace, ConfigService, ConfigSnapshot
from webui.errors import (
    ConfigurationInvalid,
    ConfigurationNotFound,
    InteractionClosed,
    InteractionConflict,
    InvalidAnswer,
    InvalidArguments,
    NotFound,
    StorageFull,
)
from webui.files.store import FileStore, worker_view
from webui.interactions.owner import OverrideRequired, Party
from webui.interactions.service import InteractionService
from webui.mcp.binding import Binding
from webui.mcp.keepalive import DEFAULT_INTERVAL_SECONDS, ProgressStream, describe_wait, keeping_alive
from webui.mcp.results import error_result, final_result, interaction_required_result
from webui.runs.service import RunLimits, RunRefused, RunRequest, RunService, RunUpdate
from webui.store import runs as run_store
from webui.store.models import Interaction, ManagedFile, Run
from webui.workflows.project import Entrypoint, Param, Project
from webui.workflows.schema import validate_arguments

log = logging.getLogger(__name__)

INTERNAL_ERROR = -32603
MAX_INLINE_ATTEMPTS = 3
URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
BASE64_RE = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def _invalid(message: str) -> MCPError:
    return MCPError(INVALID_PARAMS, message)


class CallBridge:
    def __init__(
        self,
        *,
        runs: RunService,
        interactions: InteractionService,
        files: FileStore,
        audit: AuditLog,
        configs: ConfigService,
        progress_interval: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        """`progress_interval`: seconds between keep-alive progress notifications (0: none)."""
        self.runs = runs
        self.interactions = interactions
        self.files = files
        self.audit = audit
        self.configs = configs
        self.progress_interval = progress_interval

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
    ) -> types.CallToolResult | types.InputRequiredResult:
        ep = b.catalog.entrypoint(params.name)
        if ep is None:
            raise _invalid(f"Unknown tool: {params.name}")
        try:
            return await self._call(ctx, b, ep, params)
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
    ) -> types.CallToolResult | types.InputRequiredResult:
        token = (params.meta or {}).get("progress_token")
        stream = ProgressStream(ctx.session.report_progress) if token is not None else None
        if params.request_state:
            run_id = await self._resume_from_state(b, ep, params)
        else:
            try:
                worker_params, stored, limits, config = await run_db(self._prepare, b, ep, params.arguments)
                run_id = await self._start(ctx, b, ep, worker_params, stored, limits, config)
            except InvalidArguments as exc:
                raise _invalid(exc.message) from None
            except RunRefused as exc:
                await self._audit(ctx, b, "tool.failed", ep, None, exc.code)
                return error_result(None, ep, "failed", exc.code, exc.message)
            except ConfigurationInvalid as exc:
                # Field names only: problems may quote values.
                await self._audit(ctx, b, "tool.failed", ep, None, exc.code, {"fields": sorted(exc.fields)})
                return error_result(None, ep, "failed", exc.code, exc.message, fields=exc.fields)
            except ConfigurationNotFound as exc:
                await self._audit(ctx, b, "tool.failed", ep, None, exc.code)
                return error_result(None, ep, "failed", exc.code, exc.message)
            return await self._follow(ctx, b, ep, run_id, stream)
        return await self._follow(ctx, b, ep, run_id, stream)

    async def _start(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        worker_params: dict[str, Any],
        stored: dict[str, Any],
        limits: RunLimits,
        config: ConfigSnapshot,
    ) -> str:
        state = getattr(getattr(ctx, "request", None), "scope", {}).get("state")
        tracked = state.get("mcp_http_runs") if isinstance(state, dict) else None
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
                env=dict(b.env),
                related=dict(b.related),
                relations=(
                    b.relations.with_config(lambda p: self.configs.snapshot(config_place(b, p)))
                    if b.relations is not None
                    else None
                ),
                limits=limits,
                config=config,
                # Written with the run, in the transaction that creates it.
                created_audit=("tool.called", self._audit_fields(ctx, b, ep, None, "started")),
                # HTTP: the gateway cancels these if the client drops this POST mid-call
                on_created=tracked.append if isinstance(tracked, list) else None,
            )
        )

    # ------------------------------------------------------------------ following a run
    async def _follow(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        run_id: str,
        stream: ProgressStream | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        keep_run = False
        finished = False

        def describe() -> str | None:
            last = stream.message if stream is not None else None
            state = self.runs.live_state(run_id)
            return describe_wait(state, title=ep.title, last_message=last, base_url=b.base_url)

        try:
            async with (
                keeping_alive(stream, self.progress_interval, describe),
                self.runs.watch(run_id) as updates,
            ):
                while True:
                    update: RunUpdate = await updates.get()
                    if update.kind == "final":
                        finished = True
                        event = "tool.completed" if update.status == "success" else "tool.failed"
                        await self._audit(ctx, b, event, ep, run_id, update.status)
                        return final_result(
                            run_id,
                            ep,
                            update.status,
                            update.output,
                            update.error,
                            files=update.files,
                            local=b.catalog.file_mode == "local",
                        )
                    if update.kind == "progress" and update.progress is not None and stream is not None:
                        await _progress(stream, update.progress)
                    elif update.kind == "waiting" and update.interaction is not None:
                        delivered = await self._deliver(ctx, b, ep, run_id, update.interaction)
                        if delivered is not None:
                            keep_run = True  # the run waits for the answer, on the same runId
                            if isinstance(delivered, types.CallToolResult):
                                details = {"interactionId": update.interaction.id}
                                await self._audit(
                                    ctx, b, "interaction.required", ep, run_id, "waiting", details
                                )
                            return delivered
        except NotFound:
            finished = True
            return error_result(run_id, ep, "failed", "internal", "The run is no longer available.")
        finally:
            if not keep_run and not finished and self.runs.is_live(run_id):
                # The client went away mid-call (cancelled, disconnected, session closed).
                with anyio.CancelScope(shield=True):
                    await self.runs.cancel(run_id, reason="The MCP client cancelled the tool call.")

    async def _deliver(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, ep: Entrypoint, run_id: str, ia: Interaction
    ) -> types.CallToolResult | types.InputRequiredResult | None:
        """Deliver one question. Returns a result to end this call with, or None when the
        answer was taken inline and the run goes on."""
        hint = (
            b.answer_hint.replace("{interactionId}", ia.id).replace("{runId}", run_id)
            if b.answer_hint
            else None
        )
        if ia.blockers:
            return interaction_required_result(
                run_id, ep, ia, reason="; ".join(ia.blockers), answer_hint=hint
            )
        if not _supports_form_elicitation(ctx):
            reason = "the client did not declare form elicitation"
            return interaction_required_result(run_id, ep, ia, reason=reason, answer_hint=hint)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return _input_required(run_id, ia)
        message = _elicit_message(ia)
        for _ in range(MAX_INLINE_ATTEMPTS):
            result = await self._elicit_unless_answered_elsewhere(ctx, ia, message)
            if result is None:
                return None  # answered in another channel (the browser): the run goes on
            try:
                await self.interactions.answer(
                    ia.id,
                    action=result.action,
                    content=result.content,
                    channel="mcp-elicitation",
                    by=_party(b),
                )
                return None
            except InvalidAnswer as exc:
                message = f"{exc.message}\n\n{_elicit_message(ia)}"
            except (InteractionClosed, InteractionConflict):
                return None  # answered elsewhere first, or the run ended: follow the run
        return interaction_required_result(
            run_id, ep, ia, reason="the answers given did not fit the form", answer_hint=hint
        )

    async def _elicit_unless_answered_elsewhere(
        self, ctx: ServerRequestContext[Any, Any], ia: Interaction, message: str
    ) -> types.ElicitResult | None:
        """Ask the client inline while watching the stored interaction: the first answer,
        from any channel, wins; if another channel answers first, the client's request is
        cancelled."""
        outcome: list[types.ElicitResult] = []
        with self.interactions.hub.subscribe("interactions") as events:
            if (await run_db(self.interactions.get, ia.id)).status != "pending":
                return None
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    outcome.append(
                        await ctx.session.elicit_form(
                            message, ia.requested_schema, related_request_id=ctx.request_id
                        )
                    )
                    tg.cancel_scope.cancel()

                async def watch() -> None:
                    async for event in events:
                        if event.data.get("interactionId") == ia.id and event.kind in ("answered", "closed"):
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(ask)
                tg.start_soon(watch)
        return outcome[0] if outcome else None

    def _state_names(self, run_id: str, interaction_id: str) -> tuple[Run | None, bool]:
        """Blocking: the run a request state names, and whether the question it names was
        asked in that run (or in a child run it waits on, started through ctx.related)."""
        run = run_store.get_run(self.runs.engine, run_id=run_id)
        try:
            asked_in = self.interactions.get(interaction_id).run_id
        except NotFound:
            return run, False
        return run, asked_in is not None and run_store.is_descendant_or_self(
            self.runs.engine, run_id=asked_in, ancestor=run_id
        )

    async def _resume_from_state(
        self, b: Binding, ep: Entrypoint, params: types.CallToolRequestParams
    ) -> str:
        """A 2026-07-28 retry: the state was unsealed by the boundary, which also checked it
        was sealed for this very credential, project and target; the answer is still made
        as this binding's party, so only the question's owner can answer through it."""
        try:
            state = json.loads(params.request_state or "")
            run_id = str(state["runId"])
            interaction_id = str(state["interactionId"])
        except (ValueError, KeyError, TypeError):
            raise _invalid("Invalid or expired requestState") from None
        # Defence in depth: the state must name a question of a run this party owns.
        run, asked_here = await run_db(self._state_names, run_id, interaction_id)
        if (
            run is None
            or not asked_here
            or run.project_id != b.catalog.project.id
            or not _party(b).owns(run.account_id)
        ):
            raise _invalid("Invalid or expired requestState")
        response = (params.input_responses or {}).get(interaction_id)
        if isinstance(response, types.ElicitResult):
            try:
                await self.interactions.answer(
                    interaction_id,
                    action=response.action,
                    content=response.content,
                    channel="mcp-input-required",
                    by=_party(b),
                )
            except (InteractionClosed, InteractionConflict, NotFound, OverrideRequired):
                pass  # answered elsewhere or run over: the run's own outcome tells the rest
            except InvalidAnswer as exc:
                raise _invalid(exc.message) from None
        return run_id

    # ------------------------------------------------------------------ files
    def _prepare(
        self, b: Binding, ep: Entrypoint, arguments: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any], RunLimits, ConfigSnapshot]:
        """What a run is started with, in one thread hop (database reads, maybe a file
        import), in this order: the arguments checked and file params resolved (else
        InvalidArguments), the project's limits (RunRefused), the configuration snapshot."""
        args = validate_arguments(b.catalog.schemas[ep.id], arguments, tool=ep.id)
        worker, stored = self._resolve_files(b, ep, args)
        limits = b.preflight() if b.preflight is not None else RunLimits()
        return worker, stored, limits, self.configs.snapshot(config_place(b), b.config_name)

    def _resolve_files(
        self, b: Binding, ep: Entrypoint, args: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        worker = dict(args)
        stored = dict(args)
        for param in ep.params:
            if param.type != "file" or param.name not in args:
                continue
            value = args[param.name]
            values = value if isinstance(value, list) else [value]
            rows = [self._file_row(b, ep, param, v) for v in values]
            views = [{"$file": worker_view(r)} for r in rows]
            ids = [{"id": r.id, "name": r.name} for r in rows]
            worker[param.name] = views if isinstance(value, list) else views[0]
            stored[param.name] = ids if isinstance(value, list) else ids[0]
        return worker, stored

    def _file_row(self, b: Binding, ep: Entrypoint, param: Param, value: Any) -> ManagedFile:
        prefix = f"Invalid arguments for tool '{ep.id}': param '{param.name}'"
        project_id = b.catalog.project.id
        if b.catalog.file_mode == "server":
            file_id = value.get("id") if isinstance(value, dict) else None
            row = self.files.get(str(file_id)) if file_id else None
            if row is None or row.project_id != project_id or row.origin == "local-import":
                raise InvalidArguments(f"{prefix}: unknown file id {file_id!r} for this project")
            return row
        path = _check_local_path(prefix, value, self.files.max_bytes)
        return self.files.import_path(project_id=project_id, path=path)


def _check_local_path(prefix: str, value: Any, max_bytes: int) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArguments(f"{prefix}: expected an absolute path to a local file")
    if value.startswith("data:"):
        raise InvalidArguments(f"{prefix}: Base64/data: content is not accepted; pass an absolute file path")
    if URL_RE.match(value):
        raise InvalidArguments(f"{prefix}: URLs are not accepted; pass an absolute file path")
    if not value.startswith("/"):
        if BASE64_RE.fullmatch(value):
            raise InvalidArguments(f"{prefix}: Base64 content is not accepted; pass an absolute file path")
        raise InvalidArguments(f"{prefix}: relative paths are not accepted; pass an absolute file path")
    path = Path(value)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InvalidArguments(f"{prefix}: no such file: {value}") from None
    except OSError as exc:
        raise InvalidArguments(f"{prefix}: cannot read {value}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArguments(f"{prefix}: {value} is not a regular file")
    if st.st_size > max_bytes:
        raise InvalidArguments(f"{prefix}: {value} is larger than the {max_bytes // (1024 * 1024)} MB limit")
    if not os.access(path, os.R_OK):
        raise InvalidArguments(f"{prefix}: {value} is not readable")
    return path


def config_place(b: Binding, project: Project | None = None) -> ConfigPlace:
    """Where the binding's runs take their configuration from: the fields of the project
    being run, in the local operator's scope (stdio) or the account's (HTTP). `project`: a
    related project whose child run the binding's caller starts."""
    project = project or b.catalog.project
    if b.transport == "stdio":
        return local_place_of(project.id, project.config_fields)
    return account_place(
        project.id, project.config_fields, account_id=b.account_id, account_name=b.account_name
    )


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


def _party(b: Binding) -> Party:
    """Who answers on the run's own MCP channel: the binding's account, or the admin principal."""
    return Party(b.account_id, b.account_id is None, b.actor)


def _supports_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    el = caps.elicitation if caps is not None else None
    # A bare `elicitation: {}` means form (the 2025-06-18 shape).
    return el is not None and (el.form is not None or el.url is None)


def _elicit_message(ia: Interaction) -> str:
    return f"{ia.title}\n\n{ia.message}" if ia.message else ia.title


def _input_required(run_id: str, ia: Interaction) -> types.InputRequiredResult:
    return types.InputRequiredResult(
        input_requests={
            ia.id: types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=_elicit_message(ia), requested_schema=ia.requested_schema
                )
            )
        },
        # Plaintext here; the RequestStateBoundary seals it and binds it to the principal.
        request_state=json.dumps({"runId": run_id, "interactionId": ia.id}),
    )
