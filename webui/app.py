"""create_app(settings): the only place the server is wired together.

The lifespan owns the long-lived pieces and tears them down in reverse order: services
(store, worker pool, run and interaction services), the project registry, the MCP
session manager and the gateway's janitor, the host service, and the calls pages start
in the background (Try it's and the host conversations').
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import logging
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from webui.audit.log import AuditLog
from webui.auth.keys import Authenticator
from webui.auth.throttle import AuthThrottle
from webui.auth.ui import UiAuth
from webui.blocking import run_db, unavailable
from webui.edge.access_log import install_redaction
from webui.edge.connections import BodyPace
from webui.edge.errors import ErrorRenderer, Refusal
from webui.edge.guard import RequestGuard
from webui.edge.headers import SecurityHeaders
from webui.edge.refusals import RefusalAudit
from webui.errors import InvalidRequest, SteamharnessError, StoreUnavailable
from webui.host.service import HostService
from webui.insights.sampler import PoolSampler
from webui.mcp.binding import base_url
from webui.mcp.event_store import BoundedEventStore
from webui.mcp.http import McpGateway
from webui.mcp.openapi import add_mcp_operations
from webui.mcp.server import project_server
from webui.observability.metrics import METRICS, Held
from webui.projects.limits import ProjectLimits
from webui.projects.registry import ProjectRegistry
from webui.replicas import replica_id_for
from webui.runs.env import server_base_env
from webui.runs.isolation import worker_user
from webui.runs.service import RunService
from webui.services import open_services, persistent_secret
from webui.settings import Settings
from webui.shutdown import drain
from webui.store import sessions as session_store
from webui.store.db import ping
from webui.tryit.service import TryIt, try_it_calls
from webui.web import (
    admin_pages,
    admin_sessions,
    api,
    api_docs,
    audit_pages,
    auth_pages,
    config_page,
    configs_api,
    conversations,
    host_pages,
    insights_page,
    keys,
    knowledge_api,
    knowledge_page,
    mcp_page,
    metrics_route,
    no_oauth,
    projects,
    runs_pages,
)
from webui.web.deps import LoginRequired
from webui.web.host_calls import HostCalls, host_calls
from webui.web.json_body import add_body_schemas
from webui.web.policies import API_KEY_OR_SESSION, PUBLIC, Policy, UnmatchedApi, declare, declared
from webui.web.state import AppState, app_state, publish, running_state
from webui.web.templating import STATIC_DIR, make_templates, page

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ["127.0.0.1", "localhost", "[::1]"]
# The API's codes for what the framework refuses before a route runs (a body it cannot
# parse, a path no route has, a method the route does not take).
HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
MAX_FIELD_PROBLEMS = 20  # of a refused request, named in its error (the rest are counted)
FIELD_NAME_MAX = 100
LOOPBACK_HOSTS = [*LOOPBACK_NAMES, *(f"{name}:*" for name in LOOPBACK_NAMES)]
LOOPBACK_ORIGINS = [f"http://{host}" for host in LOOPBACK_HOSTS]


def security_settings(settings: Settings) -> TransportSecuritySettings:
    """The Host and Origin values every route accepts (the MCP endpoint and the request
    guard share them): loopback, the configured ones, the public URL's, the internal URL's
    host (Try it calls the server there), and each allowed host's own http(s) origins (a
    page served on an allowed host posts from it)."""
    hosts = [*LOOPBACK_HOSTS, *settings.allowed_hosts]
    origins = [*LOOPBACK_ORIGINS, *settings.allowed_origins]
    for url in (settings.public_url, settings.internal_url):
        parts = urlsplit(url or "")
        if parts.netloc:
            hosts.append(parts.netloc)
            origins.append(f"{parts.scheme}://{parts.netloc}")
    origins += [f"{scheme}://{host}" for host in hosts[len(LOOPBACK_HOSTS) :] for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(dict.fromkeys(hosts)),
        allowed_origins=list(dict.fromkeys(origins)),
    )


def invalid_request(exc: RequestValidationError) -> InvalidRequest:
    """The API's error document for a request the route's declared shape refuses: each
    problem by where it is and pydantic's sentence for it, never the input it was given
    (which may be large, or a secret) nor pydantic's error types."""
    fields: dict[str, str] = {}
    errors = exc.errors()
    for error in errors[:MAX_FIELD_PROBLEMS]:
        where = ".".join(str(part) for part in error.get("loc", ()))[:FIELD_NAME_MAX] or "request"
        fields.setdefault(where, str(error.get("msg", "invalid")))
    message = "; ".join(f"{where}: {problem}" for where, problem in fields.items())
    if len(errors) > MAX_FIELD_PROBLEMS:
        message += f"; and {len(errors) - MAX_FIELD_PROBLEMS} more"
    return InvalidRequest(f"invalid request: {message}", fields)


class _GatewayEndpoint:
    """The route's ASGI endpoint; the gateway itself is built by the lifespan."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await app_state(self.app).gateway(scope, receive, send)


@contextlib.asynccontextmanager
async def page_calls(
    engine: Engine, audit: AuditLog, host: HostService, *, max_keys: int
) -> AsyncIterator[tuple[TryIt, HostCalls]]:
    """The calls pages start in the background (webui.background): Try it's, with the
    server-side keys it holds, and the host conversations'. On the way out the host's
    connections close first, so calls waiting on a request end with "shutdown" instead of
    being cut off unrecorded; then the calls still running are cancelled, and Try it's keys
    revoked. `max_keys`: the account's key cap, which a Try it key counts against."""
    try_it: TryIt | None = None
    try:
        async with try_it_calls() as try_calls, host_calls() as launches:
            try_it = TryIt(try_calls, engine, audit, max_keys=max_keys)
            try:
                yield try_it, HostCalls(launches, host)
            finally:
                with anyio.CancelScope(shield=True):
                    await host.close_all("shutdown")
    finally:
        if try_it is not None:
            with anyio.CancelScope(shield=True):
                await run_db(try_it.revoke_keys)


def _no_framework_telemetry() -> dict[str, Any]:
    """FastAPI's own OpenTelemetry spans off (the versions that have them): they would
    carry a request's query string unredacted (`?key=…`) and a client's whole tracestate;
    the MCP SDK's request spans and the run's (webui.observability.tracing) are the trace."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def _served_server(app: FastAPI) -> Server[Any] | None:
    """The MCP server the app serves, once its lifespan built it (for `/openapi.json`)."""
    state = running_state(app)
    return state.gateway.manager.app if state is not None else None


def _held(runs: RunService, gateway: McpGateway) -> Held:
    return runs.held(sessions=gateway.sessions.by_protocol_version())


def create_app(settings: Settings, *, warm_pool: bool = False) -> FastAPI:
    """`warm_pool`: start the worker pool in the background at start-up (`serve`: the first
    tool call then does not wait for the zygote); else at the first run (tests, short uses)."""
    admin_secret = settings.server_admin_key.get_secret_value() if settings.server_admin_key else None
    transport_security = security_settings(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_redaction(admin_key=admin_secret)  # after the server configured logging
        replica_id = replica_id_for(settings.data_dir)
        async with open_services(settings, replica_id=replica_id, warm_pool=warm_pool) as services:
            refusals.attach(services)  # the edge's refusals are audited from now on
            registry = ProjectRegistry(services.engine, settings.versions_dir, settings=settings)
            # Off the event loop: the hub's listener and the lease already run on it.
            for projects_dir in settings.projects_dirs:
                for folder, reason in await run_db(registry.register_dir, projects_dir):
                    log.warning("not serving %s: %s", folder, reason)
            await run_db(
                session_store.close_all_open,
                services.engine,
                reason="server restarted",
                replica_id=replica_id,
            )
            authenticator = Authenticator(
                services.engine,
                admin_key=admin_secret,
                fingerprint_secret=persistent_secret(settings, "fingerprint.key"),
            )
            limits = ProjectLimits(
                registry,
                default_max_running=settings.max_running_per_project,
                default_max_queued=settings.max_queued_per_project,
            )
            server = project_server(services, settings, limits=limits, metrics=settings.metrics_enabled)
            manager = StreamableHTTPSessionManager(
                app=server,
                json_response=False,  # SSE keeps the back-channel elicitation needs
                stateless=False,
                session_idle_timeout=settings.session_idle_timeout_seconds,
                security_settings=transport_security,
                max_request_body_size=settings.max_mcp_body_bytes,
                event_store=BoundedEventStore(
                    max_events_per_stream=settings.sse_replay_max_events_per_stream,
                    max_streams=settings.sse_replay_max_streams,
                    max_bytes=settings.sse_replay_max_bytes,
                    max_age_seconds=settings.sse_replay_max_age_seconds,
                    resume_grace_seconds=settings.sse_resume_grace_seconds,
                ),
                retry_interval=settings.sse_retry_ms,
            )
            gateway = McpGateway(
                manager=manager,
                authenticator=authenticator,
                registry=registry,
                runs=services.runs,
                audit=services.audit,
                idle_timeout=settings.session_idle_timeout_seconds,
                limits=limits,
                env=server_base_env(os.environ, settings.worker_env_passthrough),
                refusals=refusals,
                max_sessions_per_key=settings.max_sessions_per_key,
                max_sessions_admin_key=settings.max_sessions_admin_key,
                public_url=settings.public_url,
                hub=services.hub,
            )
            ui_auth = UiAuth(
                services.engine,
                secret=persistent_secret(settings, "ui-session.key"),
                idle=settings.ui_idle_timeout_seconds,
                absolute=settings.ui_absolute_timeout_seconds,
            )
            host = HostService(
                root=settings.resolved_root_dir,
                engine=services.engine,
                interactions=services.interactions,
                audit=services.audit,
                expiry_seconds=settings.interaction_expiry_seconds,
                log_dir=settings.data_dir / "logs" / "mcp-servers",
                # Under root, stdio servers run unprivileged, like workflow code.
                run_as=worker_user(
                    settings.resolved_host_server_user,
                    setting="host_server_user",
                    what="every stdio MCP server of the host",
                ),
            )
            # What this replica holds, read at each scrape (webui.observability.metrics).
            held = functools.partial(_held, services.runs, gateway)
            async with METRICS.holding(held), manager.run(), host.running(), anyio.create_task_group() as tg:
                gateway.sessions.run_background(tg)
                # The worker pool per minute, for the insights page (webui.insights.sampler).
                sampler = PoolSampler(
                    services.engine,
                    replica_id=replica_id,
                    held=held,
                    prune_every=settings.insights_prune_seconds,
                )
                tg.start_soon(sampler.run)
                try:
                    async with page_calls(
                        services.engine, services.audit, host, max_keys=settings.max_keys_per_account
                    ) as (try_it, launches):
                        publish(
                            app,
                            AppState(
                                settings=settings,
                                templates=templates,
                                auth_throttle=auth_throttle,
                                refusals=refusals,
                                services=services,
                                registry=registry,
                                authenticator=authenticator,
                                ui_auth=ui_auth,
                                gateway=gateway,
                                host=host,
                                host_calls=launches,
                                try_it=try_it,
                                # Called by `serve` when a signal starts the shutdown (webui/shutdown.py).
                                drain=functools.partial(drain, gateway=gateway, runs=services.runs),
                            ),
                        )
                        # Everything loaded at start-up is long-lived: keep full collections from
                        # walking it (they otherwise stall live streams for a few hundred ms).
                        gc.collect()
                        gc.freeze()
                        yield
                finally:
                    tg.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True):
                        await gateway.sessions.close_all("shutdown")

    app = FastAPI(
        title="steamharness MCP",
        summary="Workflow projects served as MCP servers",
        version="0.1.0",
        lifespan=lifespan,
        # /docs and /redoc are ours (webui/web/api_docs.py): FastAPI's load from a CDN with an
        # inline script, which the site's CSP blocks.
        docs_url=None,
        redoc_url=None,
        **_no_framework_telemetry(),
    )
    # Built now (the middleware holds the edge's counters), published with the rest by the lifespan.
    templates = make_templates(app.router, settings.max_file_bytes)
    auth_throttle = AuthThrottle.from_settings(settings)
    refusals = RefusalAudit(max_keys=settings.throttle_max_tracked)
    # Outermost last: proxy headers fix the client address, then every response (refusals
    # included) gets the security headers, then the guard checks the request.
    errors = ErrorRenderer(
        page=lambda request, context, status: page(request, "error.html", context, status_code=status),
        origin=lambda scope: settings.public_url or base_url(scope),
    )
    # Inside the guard: /api paths no route matches answer only a valid API key.
    app.add_middleware(UnmatchedApi, routes=app.router.routes, errors=errors)
    app.add_middleware(
        RequestGuard,
        security=transport_security,
        throttle=auth_throttle,
        refusals=refusals,
        errors=errors,
        max_body_bytes=settings.max_body_bytes,
        max_upload_bytes=settings.max_file_bytes,
        max_mcp_body_bytes=settings.max_mcp_body_bytes,
        body_pace=BodyPace(settings.body_timeout_seconds, settings.body_min_rate_bytes_per_second),
    )
    app.add_middleware(SecurityHeaders)
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    # The MCP endpoint first: every tool call is matched by the first route tried, not after
    # all the pages' and the API's.
    # Who may call each route, its own dependencies say (webui.web.policies); routes that are
    # no FastAPI routes declare it.
    for route in app.router.routes:
        declare(route, Policy.PUBLIC)  # FastAPI's own: /openapi.json
    mcp_route = Route("/api/workflows/{project_id}/mcp", endpoint=_GatewayEndpoint(app))
    app.router.routes.insert(0, declare(mcp_route, Policy.MCP_GATEWAY))
    # The OAuth paths a client probes after a 401: a 404 saying this server takes API keys.
    app.router.routes[1:1] = [declare(route, Policy.PUBLIC) for route in no_oauth.routes()]
    static = Mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")
    app.router.routes.append(declare(static, Policy.PUBLIC))
    app.router.routes.append(declare(Mount("/help", api_docs.DocsSite(), name="help"), Policy.PUBLIC))
    app.include_router(api_docs.router, dependencies=[PUBLIC])
    app.include_router(api.router)
    # A project's configurations and knowledge base: an API key, or the browser session.
    app.include_router(configs_api.router, dependencies=[API_KEY_OR_SESSION])
    app.include_router(knowledge_api.router, dependencies=[API_KEY_OR_SESSION])
    app.include_router(auth_pages.router)
    app.include_router(projects.router)
    app.include_router(conversations.router)
    app.include_router(mcp_page.router)
    app.include_router(config_page.router)
    app.include_router(knowledge_page.router)
    app.include_router(runs_pages.router)
    app.include_router(insights_page.router)
    app.include_router(keys.router)
    app.include_router(admin_pages.router)
    app.include_router(metrics_route.router, dependencies=[declared(Policy.OWN_TOKEN)])
    app.include_router(admin_sessions.router)
    app.include_router(audit_pages.router)
    app.include_router(host_pages.router)
    add_body_schemas(app)
    add_mcp_operations(app, functools.partial(_served_server, app))

    @app.exception_handler(SteamharnessError)
    async def _known_error(request: Request, exc: SteamharnessError) -> Response:
        if isinstance(exc, StoreUnavailable):
            METRICS.db_busy.labels("request").inc()
        return errors.error(request, exc)

    @app.exception_handler(Refusal)
    async def _refused(request: Request, exc: Refusal) -> Response:
        return errors.refusal(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
        if not request.url.path.startswith("/api/"):
            return await request_validation_exception_handler(request, exc)
        return await _known_error(request, invalid_request(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _framework_refusal(request: Request, exc: StarletteHTTPException) -> Response:
        if not request.url.path.startswith("/api/"):
            return await http_exception_handler(request, exc)
        code = HTTP_CODES.get(exc.status_code, "bad_request" if exc.status_code < 500 else "internal")
        return errors.response(request, exc.status_code, code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(OperationalError)
    @app.exception_handler(OSError)
    async def _storage_error(request: Request, exc: Exception) -> Response:
        # Work that reached the database or the disk outside `run_db` (sync routes in the
        # framework's thread pool): a lock held past the busy timeout is the same 503, a
        # full disk or database the same 507.
        mapped = unavailable(exc)
        if mapped is not None:
            return await _known_error(request, mapped)
        raise exc

    @app.get("/healthz", include_in_schema=False, dependencies=[PUBLIC])
    async def healthz() -> dict[str, str]:
        """Liveness plus a database read (reads go on while another process writes), and
        which replica answered."""
        services = app_state(app).services
        await run_db(ping, services.engine)
        return {"status": "ok", "replica": services.replica.replica_id if services.replica else ""}

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, exc: LoginRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        location = f"/login?{urlencode({'next': target})}"
        if request.headers.get("hx-request") == "true":
            return Response(status_code=401, headers={"HX-Redirect": location})
        if request.method != "GET":
            return page(
                request,
                "error.html",
                {"status": 401, "title": "Logged out", "message": "Your session ended; log in again."},
                status_code=401,
            )
        return RedirectResponse(location, status_code=303)

    return app
