"""Security refusals at the HTTP edge, audited without letting a flood of refusals become a
flood of rows (`RefusalAudit`); the client a refusal is about (`client_address`). How a
refusal is said: `webui.edge.errors`."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from starlette.types import Scope

from webui.audit.events import AuditName
from webui.auth.throttle import AuthThrottle
from webui.blocking import run_db
from webui.edge.errors import Refusal, surface_of
from webui.services import Services


def client_address(scope: Scope) -> str:
    """The client as the proxy-headers middleware left it (the peer, unless it is a
    trusted proxy)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class RefusalAudit:
    """At most one audit row per (event, client address) every `interval` seconds, and at
    most `max_rows` rows per interval overall; each row counts the refusals it stands for
    since the previous one (`details.refusals`). Refusals after a key's last row are not
    written until it is refused again after the interval. At most `max_keys` keys tracked."""

    def __init__(
        self,
        *,
        interval: float = 60.0,
        max_rows: int = 100,
        max_keys: int = 10_000,
        clock: Any = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_rows = max_rows
        self.max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[tuple[str, str], tuple[float, int]] = (
            OrderedDict()
        )  # -> (last row, unwritten)
        self._budget_start = float("-inf")
        self._budget_used = 0
        self._services: Services | None = None

    def attach(self, services: Services | None) -> None:
        """Where rows go: the app's services while its lifespan holds them (None: nowhere, as
        before the store opened)."""
        self._services = services

    def admit(self, event: str, address: str) -> int | None:
        """The number of refusals a row written now stands for, or None: write nothing."""
        now = self._clock()
        key = (event, address)
        last, unwritten = self._keys.pop(key, (float("-inf"), 0))
        unwritten += 1
        if now - self._budget_start >= self.interval:
            self._budget_start, self._budget_used = now, 0
        if now - last >= self.interval and self._budget_used < self.max_rows:
            self._budget_used += 1
            self._keys[key] = (now, 0)
            admitted: int | None = unwritten
        else:
            self._keys[key] = (last, unwritten)
            admitted = None
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return admitted

    async def record(
        self,
        scope: Scope,
        event: AuditName,
        *,
        outcome: str,
        actor: str | None = None,
        project_id: str | None = None,
        **details: Any,
    ) -> None:
        address = client_address(scope)
        refusals = self.admit(event, address)
        if refusals is None:
            return
        services = self._services
        if services is None:  # before the lifespan opened the store
            return
        headers = dict(scope.get("headers", []))
        user_agent = headers.get(b"user-agent", b"").decode("latin-1") or None
        surface = surface_of(scope.get("path", ""))
        fields: dict[str, Any] = {
            "actor": actor,
            "project_id": project_id,
            "outcome": outcome,
            "source": {"mcp": "mcp", "api": "api", "page": "ui"}[surface],
            "client_address": address,
            "user_agent": user_agent,
            "details": {
                "method": scope.get("method"),
                "path": scope.get("path", "")[:300],
                "refusals": refusals,
                **details,
            },
        }

        await run_db(services.audit.record_alone, services.engine, event, **fields)


async def key_throttled(
    refusals: RefusalAudit, throttle: AuthThrottle, scope: Scope, wait: int, *, credential: str = "bearer"
) -> Refusal:
    """A bad credential from an address with too many recent failures: audited, held (at most
    `wait` seconds), then refused with 429 + Retry-After instead of 401."""
    await refusals.record(scope, AuditName.AUTH_THROTTLED, outcome="429", credential=credential)
    await throttle.hold(wait)
    return Refusal(
        429,
        "throttled",
        f"too many failed credentials from this address; retry in {wait} seconds",
        {"Retry-After": str(wait)},
    )
