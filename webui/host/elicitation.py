"""A server's requests for human input (form or URL elicitations) on the host's clients.

Each becomes a stored Interaction (origin "host"), shown in the conversation view and
answered through `InteractionService.answer`; the callback waits for that answer, at most
the expiry, then tells the server `cancel`. A request the host cannot show (a form it does
not support, a link that is not http(s)) is stored closed and refused to the server.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from webui.blocking import run_db
from webui.host.connection import Connection
from webui.host.forms import unsupported_reasons
from webui.interactions.service import Answer, InteractionService
from webui.store.models import Interaction, utcnow
from webui.validation import run_check


class Elicitations:
    def __init__(self, interactions: InteractionService, *, expiry_seconds: float) -> None:
        self.interactions = interactions
        self.expiry = expiry_seconds
        self._waiting: dict[str, anyio.Event] = {}
        self._answers: dict[str, Answer] = {}
        interactions.on_answer(self._on_answer)

    def callback(self, conn: Connection) -> Any:
        """The elicitation callback of `conn`'s client."""

        async def on_elicit(
            ctx: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            return await self._elicit(conn, params)

        return on_elicit

    async def end(self, conn: Connection, reason: str) -> None:
        """Close the requests `conn`'s server is waiting on (this client's own, not another
        call's client's) and wake their callbacks."""
        for ia_id in list(conn.requests):
            event = self._waiting.get(ia_id)
            if event is not None:
                await run_db(self.interactions.close, ia_id, reason)
                event.set()

    async def _elicit(self, conn: Connection, params: types.ElicitRequestParams) -> types.ElicitResult:
        server = conn.server
        title = f"{server.name} asks"
        conversation_id = conn.conversation_id
        # The call that caused it: the conversation's only call in flight on this client.
        in_flight = [cid for cid, conv in conn.calls.items() if conv == conversation_id]
        common: dict[str, Any] = {
            "run_id": None,
            "origin": "host",
            "server_id": server.id,
            "conversation_id": conversation_id,
            "host_call_id": in_flight[0] if conversation_id and len(in_flight) == 1 else None,
            "title": title,
            "message": params.message,
        }
        if isinstance(params, types.ElicitRequestURLParams):
            if urlsplit(params.url).scheme not in ("https", "http"):
                await run_db(
                    self.interactions.create,
                    kind="url",
                    requested_schema={},
                    fields=[],
                    blockers=["only http(s) links are opened"],
                    status="closed",
                    close_reason="refused: not an http(s) link",
                    **common,
                )
                raise MCPError(INVALID_PARAMS, "the host opens only http(s) URLs")
            ia = await run_db(
                self.interactions.create,
                kind="url",
                requested_schema={"type": "object", "properties": {}},
                fields=[],
                blockers=[],
                url=params.url,
                expires_at=utcnow() + timedelta(seconds=self.expiry),
                **common,
            )
        else:
            # The server's schema may be hostile: screened in the checks' own threads.
            # Within the server's own share of the checks' threads (it wrote the schema).
            reasons = await run_check(
                f"host-server:{server.id}", unsupported_reasons, params.requested_schema
            )
            if reasons:
                await run_db(
                    self.interactions.create,
                    kind="form",
                    requested_schema=dict(params.requested_schema),
                    fields=[],
                    blockers=reasons,
                    status="closed",
                    close_reason="refused: " + "; ".join(reasons),
                    **common,
                )
                raise MCPError(INVALID_PARAMS, "the host refused this form: " + "; ".join(reasons))
            ia = await run_db(
                self.interactions.create,
                kind="form",
                requested_schema=dict(params.requested_schema),
                fields=[],
                blockers=[],
                expires_at=utcnow() + timedelta(seconds=self.expiry),
                **common,
            )
        event = anyio.Event()
        self._waiting[ia.id] = event
        conn.requests.add(ia.id)
        try:
            if ia.id not in self._answers:  # an answer may arrive before we start waiting
                with anyio.move_on_after(self.expiry):
                    await event.wait()
            answer = self._answers.pop(ia.id, None)
            if answer is None:
                # no-op if it was closed another way
                await run_db(self.interactions.close, ia.id, "expired")
                return types.ElicitResult(action="cancel")
            content = answer.content if answer.action == "accept" and ia.kind == "form" else None
            return types.ElicitResult(action=answer.action, content=content)  # pyright: ignore[reportArgumentType]
        finally:
            self._waiting.pop(ia.id, None)
            self._answers.pop(ia.id, None)
            conn.requests.discard(ia.id)
            with anyio.CancelScope(shield=True):
                if (await run_db(self.interactions.get, ia.id)).status == "pending":
                    await run_db(self.interactions.close, ia.id, "connection closed")

    async def _on_answer(self, row: Interaction, answer: Answer) -> None:
        if answer.repeated or row.origin != "host":
            return
        self._answers[row.id] = answer  # taken by the call waiting for it (or arriving to)
        event = self._waiting.get(row.id)
        if event is not None:
            event.set()
