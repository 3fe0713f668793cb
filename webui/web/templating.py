"""Templates: one Jinja2 environment (autoescape always) that can render a whole page or
one named block of it, for htmx swaps and SSE pushes from the same source.

Both kinds of response report the template and its context to a client that asks for them
(Starlette's TestClient, through the `http.response.debug` extension; a real server never
does), so tests can check what a page was given apart from how it is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Template
from jinja2_fragments import render_block
from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.types import Receive, Scope, Send

from webui.web.navigation import main_nav

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"
HTMX = "vendor/htmx-2.0.11.min.js"
HTMX_SSE = "vendor/htmx-ext-sse-2.2.4.min.js"


def make_templates(max_file_bytes: int = 50 * 1024 * 1024) -> Jinja2Blocks:
    """`max_file_bytes`: the per-file upload limit the file pickers check before uploading."""
    templates = Jinja2Blocks(directory=str(TEMPLATES_DIR))
    templates.env.autoescape = True
    templates.env.globals.update(
        HTMX=HTMX, HTMX_SSE=HTMX_SSE, MAX_FILE_BYTES=max_file_bytes, main_nav=main_nav
    )
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
    templates: Jinja2Blocks = request.app.state.templates
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
