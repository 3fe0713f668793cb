"""Templates: one Jinja2 environment (autoescape always) that can render a whole page or
one named block of it, for htmx swaps and SSE pushes from the same source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.requests import Request

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"
HTMX = "vendor/htmx-2.0.11.min.js"
HTMX_SSE = "vendor/htmx-ext-sse-2.2.4.min.js"


def make_templates() -> Jinja2Blocks:
    templates = Jinja2Blocks(directory=str(TEMPLATES_DIR))
    templates.env.autoescape = True
    templates.env.globals.update(HTMX=HTMX, HTMX_SSE=HTMX_SSE)
    return templates


def is_htmx(request: Request) -> bool:
    """A swap of part of a page (not a boosted navigation, not a history restore)."""
    headers = request.headers
    return (
        headers.get("hx-request") == "true"
        and headers.get("hx-boosted") != "true"
        and headers.get("hx-history-restore-request") != "true"
    )


def page(
    request: Request, name: str, context: dict[str, Any], *, block: str | None = None, status_code: int = 200
) -> Any:
    """Render `name`; for an htmx request, only `block` (when given)."""
    templates: Jinja2Blocks = request.app.state.templates
    ctx = {"request": request, "user": getattr(request.state, "user", None), **context}
    if block is not None and is_htmx(request):
        response = templates.TemplateResponse(request, name, ctx, block_name=block, status_code=status_code)
    else:
        response = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    response.headers["Vary"] = "HX-Request, HX-History-Restore-Request"  # caches keep page and fragment apart
    return response
