"""Delivering a run's question on the call that follows it, and taking the answer back.

The best channel the client has:
  - 2025-era sessions with form elicitation: inline `elicitation/create` on this call,
    while the stored interaction is watched (an answer from any channel wins first);
  - 2026-07-28: an `InputRequiredResult` whose (sealed) state names the run and question;
    the retry carries the answer (`resume_from_state`);
  - otherwise, or when the form cannot be an MCP form: the `interaction_required` result.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from webui.blocking import run_db
from webui.errors import InteractionClosed, InteractionConflict, InvalidAnswer, NotFound
from webui.interactions.client_requests import (
    CLIENT_KINDS,
    UNDECLARED_CHANNEL,
    client_response,
    is_client_request,
)
from webui.interactions.client_requests import input_request as client_input_request
from webui.interactions.owner import OverrideRequired, Party
from webui.interactions.service import InteractionService
from webui.mcp.binding import Binding
from webui.mcp.capabilities import declares
from webui.mcp.results import interaction_required_result
from webui.runs.service import RunService
from webui.store import runs as run_store
from webui.store.models import Interaction, Run
from webui.workflows.project import Entrypoint

MAX_INLINE_ATTEMPTS = 3
# The pending questions of a run and of the child runs it waits on read for one round (a
# run has at most 16 waiting).
MAX_READ = 50
T = TypeVar("T")


def _invalid(message: str) -> MCPError:
    return MCPError(INVALID_PARAMS, message)


class Questions:
    def __init__(self, *, runs: RunService, interactions: InteractionService) -> None:
        self.runs = runs
        self.interactions = interactions

    async def deliver(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        run_id: str,
        ia: Interaction,
        *,
        ahead: dict[str, Any] | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult | None:
        """Deliver one question (the one the run shows), with the others it waits on where the
        channel takes several. Returns a result to end this call with, or None when the call
        follows the run on (answered inline or ahead, or refused: its next question or its
        outcome comes next). `ahead`: answers the client sent with its first call
        (2026-07-28), by input key; one that names a question answers it (and is used up).
        What is sent never depends on which question of a round the run shows first."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await self._round(ctx, b, ep, run_id, ia, ahead)
        if is_client_request(ia.kind):
            await self._deliver_client_request(ctx, b, ia)
            return None
        if unsendable(ctx, ia) is not None:
            return await self._client_requests_first(ctx, b, ep, run_id, ia)
        message = _elicit_message(ia)
        for _ in range(MAX_INLINE_ATTEMPTS):
            result = await self._elicit_unless_answered_elsewhere(ctx, ia, message)
            if result is None:
                return None  # answered in another channel (the browser): the run goes on
            if isinstance(result, MCPError):
                # The client refused the form: the question stays open for the browser (its
                # words are not repeated anywhere).
                return self._required(b, ep, run_id, ia, "the client refused the elicitation request")
            try:
                await self.interactions.answer(
                    ia.id,
                    action=result.action,
                    content=result.content,
                    channel="mcp-elicitation",
                    by=party(b),
                )
                return None
            except InvalidAnswer as exc:
                message = f"{exc.message}\n\n{_elicit_message(ia)}"
            except (InteractionClosed, InteractionConflict):
                return None  # answered elsewhere first, or the run ended: follow the run
        return self._required(b, ep, run_id, ia, "the answers given did not fit the form")

    @staticmethod
    def _required(
        b: Binding, ep: Entrypoint, run_id: str, ia: Interaction, reason: str
    ) -> types.CallToolResult:
        """The `interaction_required` result naming `ia`: answer it in the browser or the API."""
        hint = (
            b.answer_hint.replace("{interactionId}", ia.id).replace("{runId}", run_id)
            if b.answer_hint
            else None
        )
        return interaction_required_result(run_id, ep, ia, reason=reason, answer_hint=hint)

    async def _pending(self, run_id: str, ia: Interaction) -> list[Interaction]:
        """The questions the run (and the child runs it waits on) has pending, `ia` first;
        without `ia` once it is not pending any more (answered or closed since it was shown)."""
        view = await run_db(run_store.task_view, self.runs.engine, run_id=run_id, max_pending=MAX_READ)
        pending = view.pending if view is not None else []
        others = [q for q in pending if q.id != ia.id]
        if len(others) < len(pending) or len(pending) >= MAX_READ:  # shown and still pending
            return [ia, *others]
        return others

    async def _client_requests_first(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, ep: Entrypoint, run_id: str, form: Interaction
    ) -> types.CallToolResult | None:
        """2025, a form this client cannot be sent: the run's pending sampling and roots
        requests are sent inline first (or refused, not declared: only this client answers
        them), then the form is offered in the browser (`interaction_required`) while it
        still waits. None: the form is answered or closed (the run goes on, or ended)."""
        pending = await self._pending(run_id, form)
        if not pending or pending[0] is not form:
            return None
        requests = [q for q in pending if is_client_request(q.kind)]
        for request in requests:
            await self._deliver_client_request(ctx, b, request)
        if requests and (await run_db(self.interactions.get, form.id)).status != "pending":
            return None
        return self._required(b, ep, run_id, form, unsendable(ctx, form) or "")

    async def _deliver_client_request(
        self, ctx: ServerRequestContext[Any, Any], b: Binding, ia: Interaction
    ) -> None:
        """2025: a request only the client answers (sampling, roots), inline on this call's
        stream; never sent to a client that did not declare the capability (the handler's
        call raises, naming it)."""
        if not declares(ctx, CLIENT_KINDS[ia.kind]):
            await self._record(b, ia, "decline", None, UNDECLARED_CHANNEL)
            return
        got = await self._send_unless_answered_elsewhere(ctx, ia)
        if got is None:
            return  # the run ended, or the request was answered through another call
        action, content = got
        try:
            await self.interactions.answer(
                ia.id, action=action, content=content, channel=f"mcp-{ia.kind}", by=party(b)
            )
        except InvalidAnswer:
            # A result that is not one (a broken client): the handler's call raises.
            await self._record(b, ia, "decline", None, f"mcp-{ia.kind}")
        except (InteractionClosed, InteractionConflict, NotFound, OverrideRequired):
            pass

    async def _record(self, b: Binding, ia: Interaction, action: str, content: Any, channel: str) -> None:
        # Answered or ended meanwhile: the run's own outcome tells the rest.
        with contextlib.suppress(
            InteractionClosed, InteractionConflict, NotFound, OverrideRequired, InvalidAnswer
        ):
            await self.interactions.answer(
                ia.id, action=action, content=content, channel=channel, by=party(b)
            )

    async def _send_unless_answered_elsewhere(
        self, ctx: ServerRequestContext[Any, Any], ia: Interaction
    ) -> tuple[str, Any] | None:
        """The request sent to the client on this call (related to it), while the stored
        row is watched, as for a form. A JSON-RPC error from the client is its refusal."""
        request = client_input_request(ia.kind, ia.client_request or {})
        result_type = types.CreateMessageResult if ia.kind == "sampling" else types.ListRootsResult
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)

        async def send() -> tuple[str, Any]:
            try:
                return "accept", await ctx.session.send_request(request, result_type, metadata=metadata)
            except MCPError:
                return "decline", None

        return await self._unless_answered_elsewhere(ia, send)

    async def _elicit_unless_answered_elsewhere(
        self, ctx: ServerRequestContext[Any, Any], ia: Interaction, message: str
    ) -> types.ElicitResult | MCPError | None:
        """Ask the client inline while watching the stored interaction. A JSON-RPC error
        from the client (it would not or could not show the form) is returned, not raised."""

        async def ask() -> types.ElicitResult | MCPError:
            try:
                return await ctx.session.elicit_form(
                    message, ia.requested_schema, related_request_id=ctx.request_id
                )
            except MCPError as exc:
                return exc

        return await self._unless_answered_elsewhere(ia, ask)

    async def _unless_answered_elsewhere(self, ia: Interaction, ask: Callable[[], Awaitable[T]]) -> T | None:
        """`ask` the client while watching the stored question: the first answer, from any
        channel, wins; None when another channel answered first (then the client's request
        is cancelled) or the question is no longer pending."""
        outcome: list[T] = []
        with self.interactions.hub.subscribe("interactions") as events:
            if (await run_db(self.interactions.get, ia.id)).status != "pending":
                return None
            async with anyio.create_task_group() as tg:

                async def client() -> None:
                    outcome.append(await ask())
                    tg.cancel_scope.cancel()

                async def watch() -> None:
                    async for event in events:
                        if event.data.get("interactionId") == ia.id and event.kind in ("answered", "closed"):
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(client)
                tg.start_soon(watch)
        return outcome[0] if outcome else None

    async def _answer_ahead(self, b: Binding, ia: Interaction, ahead: dict[str, Any]) -> bool:
        """Answer `ia` with the answer sent ahead under its key, if any fits: True when the
        run goes on. One that does not fit is dropped, and the question is asked."""
        response = ahead.pop(input_key(ia), None)
        if response is None:
            return False
        try:
            action, content = answer_of(ia, response)
            await self.interactions.answer(
                ia.id, action=action, content=content, channel="mcp-input-required", by=party(b)
            )
        except InvalidAnswer:
            return False
        except (InteractionClosed, InteractionConflict, NotFound, OverrideRequired):
            pass  # answered elsewhere first, or the run ended: follow the run
        return True

    async def _round(
        self,
        ctx: ServerRequestContext[Any, Any],
        b: Binding,
        ep: Entrypoint,
        run_id: str,
        ia: Interaction,
        ahead: dict[str, Any] | None,
    ) -> types.CallToolResult | types.InputRequiredResult | None:
        """2026-07-28: one input round with every pending question of the run (and of the
        child runs it waits on) that this client can be sent (a form it can carry, a
        sampling or roots request it declared), each under its key; the sealed state names
        the run and, for each key, its question. Whichever question the run shows first:
        a sampling or roots request the client did not declare is refused at once; a form
        it cannot be sent stays for the browser, and the client is told so
        (`interaction_required`) only once nothing else is left to send it. None: the call
        follows the run on (an answer sent ahead was taken, or nothing waits any more)."""
        questions = await self._pending(run_id, ia)
        sendable: list[Interaction] = []
        unsent: list[tuple[Interaction, str]] = []
        for q in questions:
            if is_client_request(q.kind) and not declares(ctx, CLIENT_KINDS[q.kind]):
                await self._record(b, q, "decline", None, UNDECLARED_CHANNEL)
            elif (reason := unsendable(ctx, q)) is not None:
                unsent.append((q, reason))
            else:
                sendable.append(q)
        if ahead:
            taken = [q for q in sendable if await self._answer_ahead(b, q, ahead)]
            if taken:
                return None  # the run goes on, or shows what it still waits for
        if sendable:
            asked = keyed(*sendable)
            return types.InputRequiredResult(
                input_requests={key: input_request(q) for key, q in asked.items()},
                # Plaintext here; the RequestStateBoundary seals it and binds it to the principal.
                request_state=json.dumps({"runId": run_id, "keys": {key: q.id for key, q in asked.items()}}),
            )
        if unsent:
            form, reason = unsent[0]
            return self._required(b, ep, run_id, form, reason)
        return None

    def _asked_in(self, run_id: str, ids: Collection[str]) -> tuple[Run | None, dict[str, Interaction]]:
        """Blocking, in one thread hop: the run a request state names, and those of the
        questions it names that were asked in that run (or in a child run it waits on,
        started through ctx.related)."""
        engine = self.runs.engine
        run = run_store.get_run(engine, run_id=run_id)
        asked: dict[str, Interaction] = {}
        if run is None:
            return None, asked
        for interaction_id in set(ids):
            try:
                ia = self.interactions.get(interaction_id)
            except NotFound:
                continue
            if ia.run_id is not None and run_store.is_descendant_or_self(
                engine, run_id=ia.run_id, ancestor=run_id
            ):
                asked[interaction_id] = ia
        return run, asked

    async def resume_from_state(self, b: Binding, ep: Entrypoint, params: types.CallToolRequestParams) -> Run:
        """A 2026-07-28 retry: the state was unsealed by the boundary, which also checked it
        was sealed for this very credential, project and target; the answers are still made
        as this binding's party, so only the questions' owner can answer through it. A key
        the client did not answer leaves its question pending: the run's next round asks it
        again. The run (as read before the answers) is returned; a retry replayed after its
        run ended follows it to its outcome all the same."""
        try:
            state = json.loads(params.request_state or "")
            run_id = str(state["runId"])
            keys = state["keys"] if "keys" in state else {state["interactionId"]: state["interactionId"]}
            if not isinstance(keys, dict) or not keys:
                raise TypeError
            keys = {str(k): str(v) for k, v in keys.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise _invalid("Invalid or expired requestState") from None
        run, asked = await run_db(self._asked_in, run_id, list(keys.values()))
        # Defence in depth: the state must name questions of a run this party owns.
        if (
            run is None
            or any(interaction_id not in asked for interaction_id in keys.values())
            or run.project_id != b.catalog.project.id
            or run.entrypoint_id != ep.id  # a state of another tool's call
            or not party(b).owns(run.account_id)
        ):
            raise _invalid("Invalid or expired requestState")
        responses = params.input_responses or {}
        answers: list[tuple[str, str, str, Any]] = []
        for key, interaction_id in keys.items():
            response = responses.get(key)
            if response is None:
                continue
            try:
                action, content = answer_of(asked[interaction_id], response)
                await self.interactions.check_answer(
                    asked[interaction_id], action, content, account=b.account_id
                )
            except InvalidAnswer as exc:
                raise _invalid(f"{key}: {exc.message}") from None  # nothing of the round recorded
            answers.append((key, interaction_id, action, content))
        for key, interaction_id, action, content in answers:
            try:
                await self.interactions.answer(
                    interaction_id,
                    action=action,
                    content=content,
                    channel="mcp-input-required",
                    by=party(b),
                )
            except (InteractionClosed, InteractionConflict, NotFound, OverrideRequired):
                pass  # answered elsewhere or run over: the run's own outcome tells the rest
            except InvalidAnswer as exc:
                raise _invalid(f"{key}: {exc.message}") from None
        return run


def party(b: Binding) -> Party:
    """Who answers on the run's own MCP channel: the binding's account, or the admin principal."""
    return Party(b.account_id, b.account_id is None, b.actor)


def _supports_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    el = caps.elicitation if caps is not None else None
    # A bare `elicitation: {}` means form (the 2025-06-18 shape).
    return el is not None and (el.form is not None or el.url is None)


def _elicit_message(ia: Interaction) -> str:
    return f"{ia.title}\n\n{ia.message}" if ia.message else ia.title


def elicit_request(ia: Interaction) -> types.ElicitRequest:
    """A stored question as the form elicitation request an input round or a task carries."""
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=_elicit_message(ia), requested_schema=ia.requested_schema
        )
    )


def input_request(
    ia: Interaction,
) -> types.ElicitRequest | types.CreateMessageRequest | types.ListRootsRequest:
    """A stored question or client request as the request an input round or a task carries."""
    if is_client_request(ia.kind):
        return client_input_request(ia.kind, ia.client_request or {})
    return elicit_request(ia)


def answer_of(ia: Interaction, response: Any) -> tuple[str, Any]:
    """An input response to `ia` as (action, content); InvalidAnswer if it is no answer to
    it (a roots result for a form, say)."""
    if is_client_request(ia.kind):
        return client_response(ia.kind, response)
    if isinstance(response, dict):
        try:
            response = types.ElicitResult.model_validate(response)
        except ValidationError:
            raise InvalidAnswer("expected an elicitation answer (action, content)") from None
    if not isinstance(response, types.ElicitResult):
        raise InvalidAnswer("expected an elicitation answer (action, content)")
    return response.action, response.content


def answerable_by(ctx: ServerRequestContext[Any, Any], ia: Interaction) -> bool:
    """Whether this request's client can be sent `ia` in a round or a task's inputRequests."""
    if is_client_request(ia.kind):
        return declares(ctx, CLIENT_KINDS[ia.kind])
    return unsendable(ctx, ia) is None


def unsendable(ctx: ServerRequestContext[Any, Any], ia: Interaction) -> str | None:
    """Why this request's client cannot be sent the form (or approval) `ia`; None when it can
    (a sampling or roots request: whether it was declared, `declares`)."""
    if is_client_request(ia.kind):
        return None
    if ia.blockers:
        return "; ".join(ia.blockers)
    if not _supports_form_elicitation(ctx):
        return "the client did not declare form elicitation"
    return None


def input_key(ia: Interaction) -> str:
    """What an input round calls the question: its handler's key, else its id."""
    return ia.input_key or ia.id


def keyed(*questions: Interaction, by_id: Collection[str] = ()) -> dict[str, Interaction]:
    """Questions by the key a round gives them: the handler's key, or the question's id
    where there is none, it is in `by_id`, an earlier question of the round took it, or it
    is the id of a question of the round (a handler cannot shadow a question another one
    asked)."""
    ids = {q.id for q in questions}
    asked: dict[str, Interaction] = {}
    for question in questions:
        key = question.id if question.id in by_id else input_key(question)
        asked[key if key not in asked and (key == question.id or key not in ids) else question.id] = question
    return asked
