"""The baselines for `http_call.py`: a bare MCP SDK Streamable HTTP server and a raw upload endpoint.

- `/mcp`: the lowlevel `mcp.server.lowlevel.Server` of bench/bare_stdio_server.py (the same
  `echo` handler from examples/hello, called in-process), behind a `StreamableHTTPSessionManager`
  configured as `steamharness serve` configures its own (SSE responses, 2025 sessions, loopback
  Host/Origin checks). No auth, no session binding, no run persistence, no worker process.
- `/upload`: streams the request body into a temp file as it arrives (`request.stream()`), then
  renames it into place and answers 201. No hashing, no database row, no auth.

Both are served by uvicorn with the same settings as `steamharness serve` (default protocol
stack, INFO logging with the access log, 5 s graceful shutdown), on loopback only.

Run: `python bench/bare_http_server.py --port N --upload-dir DIR` (files are written in DIR).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from bare_stdio_server import build_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def build_app(upload_dir: Path) -> Starlette:
    manager = StreamableHTTPSessionManager(
        app=build_server(),
        json_response=False,
        stateless=False,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=LOOPBACK_HOSTS,
            allowed_origins=LOOPBACK_ORIGINS,
        ),
    )

    async def upload(request: Request) -> JSONResponse:
        fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=upload_dir)
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    out.write(chunk)
            os.replace(tmp, upload_dir / "upload.bin")
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return JSONResponse({"size": size}, status_code=201)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(
        routes=[
            Route("/mcp", endpoint=StreamableHTTPASGIApp(manager)),
            Route("/upload", endpoint=upload, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upload-dir", type=Path, required=True)
    args = parser.parse_args()
    args.upload_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        build_app(args.upload_dir),
        host="127.0.0.1",
        port=args.port,
        timeout_graceful_shutdown=5,
        log_level="info",
    )


if __name__ == "__main__":
    main()
