"""Tool calls started from a host conversation's page, run in the background.

A call may wait minutes for a person (a server's form or URL request, answered in
/inbox), so the page starts it here and answers at once: `HostCalls` connects the
server, then calls the tool through HostService (which records and audits the call), in
the background-call registry (webui.background) the app's lifespan owns. A `Launch`
is what the page shows of a call until the service has its row; its group is the
conversation, whose long-poll wakes at each change of one of its calls.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio

from webui.background import BackgroundCall, BackgroundCalls
from webui.errors import SteamharnessError
from webui.host.service import HostService
from webui.store.models import HostCall, utcnow

log = logging.getLogger(__name__)

KEEP_FINISHED_SECONDS = 600.0
MAX_LAUNCHES = 500


@dataclass(kw_only=True)
class Launch(BackgroundCall):
    """A tool call started from a page, until the service has its result (or refused it).
    Its group is the conversation."""

    server_id: str
    tool: str
    arguments: dict[str, Any]
    actor: str
    started_at: datetime = field(default_factory=utcnow)
    phase: str = "connecting"  # connecting | calling | done
    row: HostCall | None = None
    error: str | None = None
    # The id the service gives the call's row, chosen here so the page can tell that row
    # apart from the others while the launch is still in flight.
    call_id: str = field(default_factory=lambda: f"call_{secrets.token_hex(6)}")

    @property
    def conversation_id(self) -> str:
        return self.group


def host_calls() -> BackgroundCalls[Launch]:
    """The registry of the calls started from pages (the app's lifespan enters it)."""
    return BackgroundCalls(max_calls=MAX_LAUNCHES, keep_finished_seconds=KEEP_FINISHED_SECONDS)


class HostCalls:
    """Tool calls started from pages: connect the server, then call the tool through the
    host service. The calls run in the registry the app's lifespan owns (so a call outlives
    the request that started it, and ends with the app)."""

    def __init__(self, calls: BackgroundCalls[Launch], host: HostService) -> None:
        self.calls = calls
        self._host = host

    def start(
        self, conversation_id: str, server_id: str, tool: str, arguments: dict[str, Any], actor: str
    ) -> Launch:
        launch = Launch(
            id=f"launch_{secrets.token_hex(6)}",
            group=conversation_id,
            server_id=server_id,
            tool=tool,
            arguments=arguments,
            actor=actor,
        )
        return self.calls.start(launch, self._drive)

    def of(self, conversation_id: str) -> list[Launch]:
        return self.calls.of(conversation_id)

    def changed(self, conversation_id: str) -> anyio.Event:
        """Set at the next change of one of the conversation's calls (take it before reading)."""
        return self.calls.changed(conversation_id)

    async def _drive(self, launch: Launch) -> None:
        host = self._host
        try:
            await host.connect(launch.conversation_id, launch.server_id)
            launch.phase = "calling"
            self.calls.notify(launch.conversation_id)
            launch.row = await host.call_tool(
                launch.conversation_id,
                launch.server_id,
                launch.tool,
                launch.arguments,
                actor=launch.actor,
                call_id=launch.call_id,
            )
        except SteamharnessError as exc:
            launch.error = exc.message
        except Exception as exc:  # the top of a background task: every failure is the call's outcome
            log.exception("host tool call failed", exc_info=exc)
            launch.error = "The call failed unexpectedly; the server log has the details."
        finally:
            launch.phase = "done"
