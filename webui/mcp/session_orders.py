"""Orders to end MCP sessions, carried by the event hub.

Whoever wants sessions ended (the sessions console, a key revocation) publishes one
`end` order on `TOPIC`; the gateway holding a session ends it (its calls and their runs
cancelled, its pending questions closed, the row closed, audited) and answers `ended`
for it. A gateway answers `not_held` for a session it does not hold: with one replica
that is final, and the stale row is closed by the caller (`webui.mcp.sessions.end_by_order`).
The caller waits (bounded) for the answers, so a page shows the outcome once it has happened.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass, field

import anyio

from webui.events import EventHub

TOPIC = "mcp-sessions"
ORDER_END = "end"
ENDED = "ended"
NOT_HELD = "not_held"
WAIT_SECONDS = 10.0


@dataclass
class Outcome:
    """What became of each session an order named."""

    ended: set[str] = field(default_factory=set)
    not_held: set[str] = field(default_factory=set)
    unanswered: set[str] = field(default_factory=set)


async def order_end(
    hub: EventHub,
    session_ids: Collection[str],
    *,
    actor: str,
    reason: str,
    wait: float = WAIT_SECONDS,
) -> Outcome:
    """Publish an order to end these sessions; return once each is answered for (or
    `wait` seconds passed)."""
    outcome = Outcome(unanswered=set(session_ids))
    if not outcome.unanswered:
        return outcome
    order_id = secrets.token_hex(8)
    with hub.subscribe(TOPIC) as sub:
        hub.publish(
            TOPIC,
            ORDER_END,
            orderId=order_id,
            sessionIds=sorted(outcome.unanswered),
            actor=actor,
            reason=reason,
        )
        with anyio.move_on_after(wait):
            async for event in sub:
                if event.data.get("orderId") != order_id or event.kind not in (ENDED, NOT_HELD):
                    continue
                sid = str(event.data.get("sessionId"))
                if sid not in outcome.unanswered:
                    continue
                outcome.unanswered.discard(sid)
                (outcome.ended if event.kind == ENDED else outcome.not_held).add(sid)
                if not outcome.unanswered:
                    break
    return outcome
