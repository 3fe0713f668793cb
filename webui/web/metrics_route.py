"""`GET /metrics`: this replica's Prometheus metrics (webui.observability.metrics).

Only for a scraper bearing the metrics token (`STEAMHARNESS_METRICS_TOKEN`) or the admin
key, as `Authorization: Bearer …`; with neither configured the route answers 404, so no
server exposes its numbers by accident. A wrong token counts as a failed credential of its
address, like a wrong API key, and is audited (`auth.failed`, `auth.throttled`); a throttled
address is refused before its token is checked."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from webui.audit.events import AuditName
from webui.auth.throttle import AuthThrottle
from webui.observability.metrics import METRICS
from webui.settings import Settings
from webui.web.refusals import RefusalAudit, client_address

router = APIRouter()


def _tokens(settings: Settings) -> list[bytes]:
    return [
        secret.get_secret_value().encode()
        for secret in (settings.metrics_token, settings.server_admin_key)
        if secret is not None
    ]


def _refusal(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


async def _throttled(request: Request, throttle: AuthThrottle, wait: int) -> Response:
    refusals: RefusalAudit = request.app.state.refusals
    await refusals.record(request.scope, AuditName.AUTH_THROTTLED, outcome="429", credential="metrics")
    await throttle.hold(wait)
    message = f"too many failed credentials from this address; retry in {wait} seconds"
    return _refusal(429, "throttled", message, {"Retry-After": str(wait)})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    if not settings.metrics_enabled:
        return _refusal(404, "not_found", "metrics are off (STEAMHARNESS_METRICS_ENABLED=false)")
    tokens = _tokens(settings)
    if not tokens:
        return _refusal(404, "not_found", "metrics are off: set STEAMHARNESS_METRICS_TOKEN to scrape them")
    throttle: AuthThrottle = request.app.state.auth_throttle
    address = client_address(request.scope)
    # A throttled address is refused before its token is checked (the token is an operator's
    # choice, like a password: guessing must slow down for the right guess too).
    wait = throttle.bearer_retry_after(address)
    if wait is not None:
        return await _throttled(request, throttle, wait)
    authorization = request.headers.get("authorization") or ""
    scheme, _, given = authorization.partition(" ")
    offered = given.strip().encode()
    ok = False
    for token in tokens:  # every one compared, in constant time
        ok |= scheme.lower() == "bearer" and hmac.compare_digest(offered, token)
    if not ok:
        wait = throttle.bearer_failed(address)
        if wait is not None:
            return await _throttled(request, throttle, wait)
        refusals: RefusalAudit = request.app.state.refusals
        await refusals.record(request.scope, AuditName.AUTH_FAILED, outcome="401", credential="metrics")
        return _refusal(
            401,
            "unauthorized",
            "a metrics scrape needs Authorization: Bearer <metrics token>",
            {"WWW-Authenticate": 'Bearer realm="steamharness-metrics"'},
        )
    return Response(
        METRICS.exposition(), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"}
    )
