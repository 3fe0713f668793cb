"""`GET /metrics`: this replica's Prometheus metrics (webui.observability.metrics).

Only for a scraper bearing the metrics token (`STEAMHARNESS_METRICS_TOKEN`) or the admin
key, as `Authorization: Bearer …`; with neither configured the route answers 404, so no
server exposes its numbers by accident. The token is checked first, like an API key: the
right one is always answered, even from an address that strangers' bad tokens throttle (the
token is at least 32 bytes of the secret key's rule, so no guess at it can succeed). A wrong
token counts as a failed credential of its address and is audited (`auth.failed`); once the
address is throttled its wrong tokens are refused with 429 (`auth.throttled`) and not counted
again."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from webui.audit.events import AuditName
from webui.auth.throttle import AuthThrottle
from webui.edge.refusals import RefusalAudit, client_address
from webui.observability.metrics import METRICS
from webui.settings import Settings
from webui.web.deps import AuthThrottleDep, RefusalsDep, SettingsDep

router = APIRouter()


def _tokens(settings: Settings) -> list[bytes]:
    return [
        secret.get_secret_value().encode()
        for secret in (settings.metrics_token, settings.server_admin_key)
        if secret is not None
    ]


def _refusal(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


async def _throttled(request: Request, throttle: AuthThrottle, refusals: RefusalAudit, wait: int) -> Response:
    await refusals.record(request.scope, AuditName.AUTH_THROTTLED, outcome="429", credential="metrics")
    await throttle.hold(wait)
    message = f"too many failed credentials from this address; retry in {wait} seconds"
    return _refusal(429, "throttled", message, {"Retry-After": str(wait)})


@router.get("/metrics", include_in_schema=False)
async def metrics(
    request: Request, settings: SettingsDep, throttle: AuthThrottleDep, refusals: RefusalsDep
) -> Response:
    if not settings.metrics_enabled:
        return _refusal(404, "not_found", "metrics are off (STEAMHARNESS_METRICS_ENABLED=false)")
    tokens = _tokens(settings)
    if not tokens:
        return _refusal(404, "not_found", "metrics are off: set STEAMHARNESS_METRICS_TOKEN to scrape them")
    authorization = request.headers.get("authorization") or ""
    scheme, _, given = authorization.partition(" ")
    offered = given.strip().encode()
    ok = False
    for token in tokens:  # every one compared, in constant time
        ok |= scheme.lower() == "bearer" and hmac.compare_digest(offered, token)
    if not ok:
        # Only failures meet the throttle: a scraper with the token is never held back by
        # strangers sending bad ones from its address (a NAT, a proxy).
        wait = throttle.bearer_failed(client_address(request.scope))
        if wait is not None:
            return await _throttled(request, throttle, refusals, wait)
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
