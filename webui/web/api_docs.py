"""The in-app API reference and the documentation site, served offline under the site's
Content-Security-Policy.

`/docs` is Swagger UI rendering `/openapi.json`: its script and stylesheet are vendored under
`static/vendor/` with their version in the file name, and started by a file of ours
(`static/js/api-docs.js`), so the page needs no CDN and no inline script: the CSP every page
has (`script-src 'self'`) is all it needs, and nothing is loosened anywhere. `/redoc` (FastAPI's
other default) leads there. `/help/` is the documentation site (`docs/`) once it is built
(`scripts/docs build` writes `docs/_build/html`); until then it says how to build it."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from webui.web.templating import ROOT

SWAGGER_UI_VERSION = "5.36.0"
SWAGGER_UI_JS = f"/static/vendor/swagger-ui-bundle-{SWAGGER_UI_VERSION}.js"
SWAGGER_UI_CSS = f"/static/vendor/swagger-ui-{SWAGGER_UI_VERSION}.css"
# The built documentation site (`scripts/docs build`).
DOCS_SITE_DIR = ROOT / "docs" / "_build" / "html"

router = APIRouter(include_in_schema=False)

PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>API reference · steamharness MCP</title>
  <link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="{SWAGGER_UI_CSS}">
  <script src="{SWAGGER_UI_JS}" defer></script>
  <script src="/static/js/api-docs.js" defer></script>
</head>
<body>
  <p><a href="/projects">steamharness MCP</a> · <a href="/help/">Documentation</a> ·
  <a href="/openapi.json">openapi.json</a></p>
  <div id="swagger-ui"></div>
</body>
</html>
"""

NOT_BUILT = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Documentation · steamharness MCP</title></head>
<body>
  <h1>The documentation site is not built here</h1>
  <p>Build it from the source with <code>scripts/docs build</code> (it needs the <code>docs</code>
  extra: <code>pip install -e '.[docs]'</code>); this server then serves it at
  <code>/help/</code>. The pages are the Markdown files under <code>docs/</code>.</p>
  <p>The API reference is at <a href="/docs">/docs</a>.</p>
</body>
</html>
"""


@router.get("/docs")
async def api_reference() -> HTMLResponse:
    return HTMLResponse(PAGE)


@router.get("/redoc")
async def redoc() -> RedirectResponse:
    return RedirectResponse("/docs", status_code=307)


class DocsSite:
    """`/help/`: the built site's files, or a page saying how to build it."""

    def __init__(self, directory: Path = DOCS_SITE_DIR) -> None:
        self.directory = directory
        self.files: StaticFiles | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.files is None and (self.directory / "index.html").is_file():
            self.files = StaticFiles(directory=str(self.directory), html=True)
        if self.files is None:
            await HTMLResponse(NOT_BUILT, status_code=404)(scope, receive, send)
            return
        await self.files(scope, receive, send)
