"""Try it: the MCP page's tool calls, made as an MCP client of the app's own endpoint.

The service only: the page's routes (webui/web/mcp_page.py) start calls and show them.

Each call uses a server-side key of the logged-in user. That raw key lives in this
process's memory only (never in a page, a log or the audit) and is revoked when the app
shuts down. The client declares no elicitation, so a run that asks a question ends the call
with `interaction_required` and stays waiting in the store, where the conversation view
answers it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import Engine

from webui import admin, strict_json
from webui.audit.log import AuditLog
from webui.auth.ui import UiUser
from webui.background import BackgroundCall, BackgroundCalls
from webui.blocking import run_db
from webui.errors import NotFound
from webui.parse_threads import run_parse
from webui.projects.registry import Resolved
from webui.store import accounts as account_store
from webui.store import runs as run_store

log = logging.getLogger(__name__)

TRY_IT_AGENT = "steamharness-try-it"  # the User-Agent the audit rows of Try it calls carry
TRY_IT_KEY_NAME = "try-it (server-side)"
DEFAULT_CALL_SECONDS = 600.0  # bound for a tool without timeoutSeconds
CALL_SLACK_SECONDS = 60.0  # queueing and worker start-up on top of the entrypoint's timeout
KEEP_FINISHED_SECONDS = 600.0
MAX_CALLS = 200


@dataclass(frozen=True)
class Outcome:
    kind: str  # result | rpc_error | failed
    payload: dict[str, Any] | None = None
    is_error: bool = False
    code: int | None = None
    message: str | None = None

    @property
    def error(self) -> dict[str, Any]:
        value = (self.payload or {}).get("error")
        return value if isinstance(value, dict) else {}

    @property
    def output(self) -> Any:
        return (self.payload or {}).get("output")


@dataclass(kw_only=True)
class TryCall(BackgroundCall):
    account_id: int
    project_id: str
    target: str
    tool: str
    arguments: dict[str, Any]
    config: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    outcome: Outcome | None = None

    def settle(self, outcome: Outcome) -> None:
        """Record the outcome (the registry marks the call finished when its work returns)."""
        self.outcome = outcome
        run_id = (outcome.payload or {}).get("runId")
        if isinstance(run_id, str):
            self.run_id = run_id


def _leaf(exc: BaseException) -> BaseException:
    """The one real error inside the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _parsed_text(text: str) -> Any:
    try:
        return strict_json.loads(text)
    except ValueError:
        return {"text": text}


async def _result_outcome(result: types.CallToolResult) -> Outcome:
    payload = result.structured_content
    if payload is None:
        text = next((c.text for c in result.content if isinstance(c, types.TextContent)), "")
        parsed = await run_parse(len(text), _parsed_text, text)  # a workflow's text: off the loop when large
        payload = parsed if isinstance(parsed, dict) else {"value": parsed}
    return Outcome(kind="result", payload=payload, is_error=bool(result.is_error))


def try_it_calls() -> BackgroundCalls[TryCall]:
    """The registry of Try it calls (the app's lifespan enters it)."""
    return BackgroundCalls(max_calls=MAX_CALLS, keep_finished_seconds=KEEP_FINISHED_SECONDS)


class TryIt:
    """Try it calls and the per-account server-side keys they use. The calls run in the
    registry the app's lifespan owns, so a call outlives the request that started it (a long
    run is not cancelled because the browser's request ended) and ends with the app."""

    def __init__(
        self,
        calls: BackgroundCalls[TryCall],
        engine: Engine,
        audit: AuditLog,
        *,
        max_keys: int = admin.DEFAULT_MAX_KEYS,
    ) -> None:
        self.calls = calls
        self._engine = engine
        self._audit = audit
        self._max_keys = max_keys  # the account's key cap, which the Try it key counts against
        self._keys: dict[int, tuple[str, str]] = {}  # account id -> (key id, raw key)

    def key_for(self, user: UiUser) -> str:
        """The account's server-side key, created on first use (or after a revocation)."""
        held = self._keys.get(user.account_id)
        if held is not None:
            row = account_store.get_key(self._engine, key_id=held[0])
            if row is not None and row.revoked_at is None:
                return held[1]
        raw, row = admin.create_key(
            self._engine,
            user=user.name,
            projects=None,
            scopes=["runs.create"],
            name=TRY_IT_KEY_NAME,
            actor=user.actor,
            source="ui",
            audit=self._audit,
            max_keys=self._max_keys,
        )
        self._keys[user.account_id] = (row.id, raw)
        return raw

    async def start(
        self,
        user: UiUser,
        *,
        url: str,
        target: str,
        resolved: Resolved,
        tool: str,
        arguments: dict[str, Any],
        config: str | None = None,
    ) -> TryCall:
        raw = await run_db(self.key_for, user)
        call = TryCall(
            id=secrets.token_urlsafe(12),
            account_id=user.account_id,
            project_id=resolved.project.id,
            target=target,
            tool=tool,
            arguments=arguments,
            config=config,
        )
        ep = resolved.project.entrypoint(tool)
        seconds = ep.timeout_seconds if ep is not None and ep.timeout_seconds else DEFAULT_CALL_SECONDS
        bound = seconds + CALL_SLACK_SECONDS
        return self.calls.start(call, functools.partial(self._drive, url=url, raw=raw, bound=bound))

    def get(self, call_id: str, user: UiUser, project_id: str) -> TryCall:
        call = self.calls.get(call_id)
        if call is None or call.account_id != user.account_id or call.project_id != project_id:
            raise NotFound("this Try it call is unknown or has expired; run the tool again")
        return call

    async def find_run(self, call: TryCall) -> None:
        """Fill in the run id of a call still running (its session's run, once there is one)."""
        if call.run_id is None and call.session_id is not None:
            call.run_id = await run_db(self._run_of_session, call)

    def revoke_keys(self) -> None:
        for key_id, _ in self._keys.values():
            with contextlib.suppress(NotFound):
                admin.revoke_key(self._engine, key_id=key_id, actor="try-it", source="ui", audit=self._audit)
        self._keys.clear()

    def _run_of_session(self, call: TryCall) -> str | None:
        """A running call's run id: each call opens its own MCP session, which has one run."""
        rows = run_store.list_runs(self._engine, project_ids=[call.project_id], source="mcp", limit=50)
        return next((r.id for r in rows if r.session_id == call.session_id), None)

    async def _drive(self, call: TryCall, *, url: str, raw: str, bound: float) -> None:
        async def remember_session(response: httpx2.Response) -> None:
            sid = response.headers.get("mcp-session-id")
            if sid and call.session_id is None:
                call.session_id = sid

        headers = {
            "Authorization": f"Bearer {raw}",
            "User-Agent": TRY_IT_AGENT,
            "X-Steamharness-Source": "try-it",
        }
        try:
            with anyio.fail_after(bound):
                async with (
                    httpx2.AsyncClient(
                        headers=headers,
                        trust_env=False,  # the key goes to this server only, never via an env proxy
                        timeout=httpx2.Timeout(30, read=bound),
                        event_hooks={"response": [remember_session]},
                    ) as http,
                    Client(
                        streamable_http_client(url, http_client=http),
                        mode="legacy",
                        client_info=types.Implementation(name=TRY_IT_AGENT, version="1"),
                    ) as client,
                ):
                    result = await client.call_tool(call.tool, call.arguments)
            call.settle(await _result_outcome(result))
        except Exception as exc:  # the top of a background task: every failure is the call's outcome
            call.settle(self._failure(_leaf(exc), url, bound))

    @staticmethod
    def _failure(exc: BaseException, url: str, bound: float) -> Outcome:
        if isinstance(exc, MCPError):
            return Outcome(kind="rpc_error", code=exc.code, message=exc.message)
        if isinstance(exc, TimeoutError | httpx2.ReadTimeout):
            return Outcome(
                kind="failed", message=f"No answer within {bound:.0f} seconds; the call was cancelled."
            )
        if isinstance(exc, httpx2.HTTPError):
            # Details stay in the server log: the page only says the server's own endpoint failed.
            log.warning("Try it could not reach %s: %s", url, exc)
            return Outcome(kind="failed", message="Could not reach the MCP endpoint of this server.")
        log.exception("Try it call failed", exc_info=exc)
        return Outcome(kind="failed", message="The call failed unexpectedly; the server log has the details.")
