"""Templates: one Jinja2 environment (autoescape always) that can render a whole page or
one named block of it, for htmx swaps and SSE pushes from the same source.

Both kinds of response report the template and its context to a client that asks for them
(Starlette's TestClient, through the `http.response.debug` extension; a real server never
does), so tests can check what a page was given apart from how it is drawn.

Templates name the app's routes, never write their paths: `url("route_name", param=value)`
is the route's path (each value one percent-encoded path segment), relative like the
links it replaces; only `/static/…` and other sites' addresses are written out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Template
from jinja2_fragments import render_block
from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Router
from starlette.types import Receive, Scope, Send

from webui.web.navigation import main_nav
from webui.web.state import app_state

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"
HTMX = "vendor/htmx-2.0.11.min.js"
HTMX_SSE = "vendor/htmx-ext-sse-2.2.4.min.js"


def route_paths(router: Router) -> Callable[..., str]:
    """`url(name, **params)` for the templates: the path of the route called `name` (a
    route's name is its endpoint's, unless it is given one), each param one segment:
    `/ \\ ? # %`, spaces, controls and non-ASCII percent-encoded (a value `.` or
    `..` its dots twice), so a value (stored data,
    perhaps hostile, perhaps empty) can never add a segment, a query or a fragment; the
    rest is left as it is and escaped as HTML by the template, as a value written into a
    path was. An unknown name, or params other than the route's, fail loudly
    (`NoMatchFound`). Each (name, params) is looked up in the router once, with marks where
    the values go."""
    formats: dict[tuple[str, frozenset[str]], str] = {}

    def url(name: str, /, **params: Any) -> str:
        key = (name, frozenset(params))
        path = formats.get(key)
        if path is None:
            path = formats[key] = str(router.url_path_for(name, **{k: _mark(k) for k in params}))
        for k, value in params.items():
            path = path.replace(_mark(k), segment(value))
        return path

    return url


# Printable ASCII a path segment may hold as it is (beside letters, digits and `_.-~`); not
# `\`, which a browser reads as `/` in an http URL.
SEGMENT_SAFE = "!$&'()*+,;=:@<>\"[]{}|^`"
# A value a browser would resolve as a dot segment (`%2e` too): its dots encoded twice, so the
# link names no other page (the route gets `%2E`, which no id is).
DOT_SEGMENTS = {".": "%252E", "..": "%252E%252E"}


def segment(value: Any) -> str:
    """`value` as one path segment of a link, whatever it holds."""
    text = str(value)
    return DOT_SEGMENTS.get(text) or quote(text, safe=SEGMENT_SAFE)


def _mark(param: str) -> str:
    return f"\x00{param}\x00"  # no path, and no value once quoted, holds a NUL


def pretty_json(value: Any) -> str:
    """A JSON value as a page shows it: indented, non-ASCII as is."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def make_templates(router: Router, max_file_bytes: int = 50 * 1024 * 1024) -> Jinja2Blocks:
    """`router`: the app's, whose routes `url(...)` names; `max_file_bytes`: the per-file
    upload limit the file pickers check before uploading."""
    templates = Jinja2Blocks(directory=str(TEMPLATES_DIR))
    templates.env.autoescape = True
    templates.env.globals.update(
        HTMX=HTMX,
        HTMX_SSE=HTMX_SSE,
        MAX_FILE_BYTES=max_file_bytes,
        main_nav=main_nav,
        url=route_paths(router),
    )
    templates.env.filters["pretty_json"] = pretty_json
    return templates


def is_htmx(request: Request) -> bool:
    """A swap of part of a page (not a boosted navigation, not a history restore)."""
    headers = request.headers
    return (
        headers.get("hx-request") == "true"
        and headers.get("hx-boosted") != "true"
        and headers.get("hx-history-restore-request") != "true"
    )


class BlockResponse(HTMLResponse):
    """One named block of a template; like Starlette's whole-template response it hands its
    template and context (and the block's name) to a client that asks for them."""

    def __init__(
        self, template: Template, block: str, context: dict[str, Any], *, content: str, status_code: int
    ) -> None:
        self.template = template
        self.block = block
        self.context = context
        super().__init__(content, status_code=status_code)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if "http.response.debug" in scope.get("extensions", {}):
            info = {"template": self.template, "context": self.context, "block": self.block}
            await send({"type": "http.response.debug", "info": info})
        await super().__call__(scope, receive, send)


def page(
    request: Request, name: str, context: dict[str, Any], *, block: str | None = None, status_code: int = 200
) -> Any:
    """Render `name`; for an htmx request, only `block` (when given)."""
    templates = app_state(request.app).templates
    ctx = {"request": request, "user": getattr(request.state, "user", None), **context}
    if block is not None and is_htmx(request):
        content = render_block(templates.env, name, block, ctx)
        response = BlockResponse(
            templates.get_template(name), block, ctx, content=content, status_code=status_code
        )
    else:
        response = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    response.headers["Vary"] = "HX-Request, HX-History-Restore-Request"  # caches keep page and fragment apart
    return response
