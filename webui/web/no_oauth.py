"""The OAuth paths clients probe after a 401, answered with a 404 that says this server takes
API keys (`webui.auth.challenge`).

Which paths: the MCP Python SDK's `OAuthClientProvider` (mcp 2.3), the TypeScript SDK's
`auth()` (@modelcontextprotocol/sdk 1.32) and the MCP Inspector 2.12 CLI (its own client) each
look for protected resource metadata at `/.well-known/oauth-protected-resource/<the endpoint's
path>`, then at the root; finding none, they take the server's origin as the authorization
server and look for `/.well-known/oauth-authorization-server` and
`/.well-known/openid-configuration` (each also with a path after it, when the server named has
one), then register at `/register`, send the browser to `/authorize` and exchange a code at
`/token`. Every one of these, with whatever follows it, for every method, answers
`OAuthNotOffered`'s 404, as an OAuth error document (`{"error": "oauth_not_offered",
"error_description": …}`: what the SDKs parse and print).

The answer costs no database work and checks no credential: it says the same to everyone, so
it tells nothing about a key sent along (it is no way round the throttle of failed keys). The
guard's Host/Origin checks and body caps still apply; the body is never read."""

from __future__ import annotations

import json

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from webui.auth.challenge import no_oauth_error
from webui.mcp.binding import base_url
from webui.web.state import app_state

WELL_KNOWN = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
)
ENDPOINTS = ("/register", "/authorize", "/token")


async def no_oauth(scope: Scope, receive: Receive, send: Send) -> None:
    """A pure ASGI endpoint: every method, no body read."""
    error = no_oauth_error(app_state(scope["app"]).settings.public_url or base_url(scope))
    # OAuth's error shape (RFC 6749 section 5.2), which the SDKs parse and print.
    body = json.dumps({"error": error.code, "error_description": error.message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Endpoint:
    """Starlette hands an endpoint that is not a function every method, as a raw ASGI app."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await no_oauth(scope, receive, send)


def routes() -> list[Route]:
    """The probed paths, each alone and with anything after it."""
    endpoint = _Endpoint()
    paths = [*WELL_KNOWN, *ENDPOINTS]
    return [Route(path, endpoint=endpoint) for path in paths] + [
        Route(f"{path}/{{rest:path}}", endpoint=endpoint) for path in paths
    ]
