"""`steamharness serve`: the HTTP server (MCP per project, JSON API, web UI)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    cli_audit,
    echo,
    fail,
    hide_database_password,
    open_store,
    server_settings,
    setting_help,
)
from webui.cli.serve_claim import NotFree, claim
from webui.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# The accounts named at start as the logins to use.
LOGIN_NAMES = 3


def examples_dir(settings: Settings) -> Path:
    """The bundled example projects: the setting's folder, else this checkout's or the working
    directory's examples/."""
    candidates = [settings.examples_dir] if settings.examples_dir else []
    candidates += [Path(__file__).resolve().parents[2] / "examples", Path.cwd() / "examples"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    fail("the bundled examples were not found (set STEAMHARNESS_EXAMPLES_DIR)")


def serve_command(
    host: Annotated[
        str | None,
        typer.Option(help=setting_help("Bind address.", "host", show_default=True), show_default=False),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=setting_help("Port.", "port", show_default=True), show_default=False)
    ] = None,
    data_dir: DataDirOpt = None,
    projects_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--projects-dir",
            help="A folder of workflow projects to register (repeatable).",
            show_default=False,
        ),
    ] = None,
    database_url: DatabaseOpt = None,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help=setting_help(
                "Root config folder of the MCP servers the host connects to (default: the data dir).",
                "root_dir",
            ),
            show_default=False,
        ),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Register the bundled examples; print a login (a new password each start) and the "
            "demo API key (the same key each start while it is not revoked).",
        ),
    ] = False,
) -> None:
    """Run the server: Streamable HTTP MCP per project, JSON API, web UI."""
    hide_database_password(database_url)  # before anything else reads the command line
    dirs = [d.expanduser().resolve() for d in projects_dir or []]
    for d in dirs:
        if not d.is_dir():
            fail(f"--projects-dir {d}: not a directory")
    settings = server_settings(
        data_dir,
        database_url,
        host=host,
        port=port,
        projects_dirs=dirs or None,
        root_dir=root,
    )
    host = settings.host
    # Before anything else is printed or written: the port and the data dir are this
    # process's, or it says who holds them and exits.
    try:
        claimed = claim(settings.data_dir, host, settings.port)
    except NotFree as exc:
        echo(exc.message, err=True)
        raise typer.Exit(1) from None
    port = claimed.port

    import uvicorn

    from webui import replicas
    from webui.admin import DEMO_KEY_FILE, setup_demo
    from webui.app import create_app
    from webui.cli.db import upgrade_all
    from webui.edge.connections import HEALTH_RESERVE, BodyPace, edge_protocol
    from webui.files import created
    from webui.runs.isolation import harden_process, read_paths, worker_uids, worker_user
    from webui.store.projects import list_projects

    if host not in ("127.0.0.1", "localhost", "::1"):
        echo(
            f"steamharness: warning: listening on {host}, not loopback; put TLS in front, set allowed hosts",
            err=True,
        )
    worker_user(settings.worker_user)  # a missing worker user stops the server here
    worker_uids(settings.worker_uid_base, settings.worker_uid_count)  # so does a range an account holds
    read_paths(settings.worker_read_paths)  # and a read path that is not there
    worker_user(settings.resolved_host_server_user, setting="host_server_user", what="host stdio servers")
    created.prepare_dir(settings.resolved_file_create_store_dir, created.SETTING)
    for where, done in upgrade_all(settings):  # under a lock: concurrent start-ups migrate once
        for line in done:
            echo(f"steamharness: database {where}: {line}", err=True)
    engine, registry = open_store(settings)
    # One data dir served twice would have both processes end each other's runs.
    replica_id = replicas.replica_id_for(settings.data_dir)
    replicas.check_free(
        engine,
        replica_id=replica_id,
        ttl=settings.replica_lease_ttl_seconds,
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    for d in dirs:
        registry.register_dir(d)
    # What to open and how to log in: printed once the server accepts connections.
    started = [f"steamharness is running: open {settings.public_url or claimed.url} in a browser"]
    if demo:
        user, password, key = setup_demo(
            engine,
            registry,
            examples_dir(settings),
            key_file=settings.data_dir / DEMO_KEY_FILE,
            audit=cli_audit(),
        )
        started += [f"demo login: {user} / {password}", f"demo API key: {key}"]
        started += [
            f"  {record.name}: {claimed.url}/api/workflows/{record.id}/mcp?target=latest"
            for record in list_projects(engine)
        ]
    else:
        started.append(_login_hint(engine))
    engine.dispose()
    echo(f"steamharness: replica {replica_id}", err=True)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    harden_process()
    from uvicorn.config import STARTUP_FAILURE

    from webui.observability.tracing import configure_tracing
    from webui.shutdown import GracefulServer
    from webui.web.logging import install_format

    tracing = configure_tracing()  # off unless the OTEL_* variables ask for traces
    web_app = create_app(settings, warm_pool=True)  # a long-lived server: the first call waits for no fork
    # Every failed login verifies a password hash, a name that exists or not: the one for
    # unknown names is made now, so that the first such login is no slower than the next.
    from webui.auth.ui import warm_dummy_hash

    warm_dummy_hash()
    config = uvicorn.Config(
        web_app,
        host=host,
        port=port,
        log_level="info",
        http=edge_protocol(
            header_timeout=settings.header_timeout_seconds,
            body_pace=BodyPace(settings.body_timeout_seconds, settings.body_min_rate_bytes_per_second),
            max_connections=settings.max_connections,
            max_body_bytes=settings.max_body_bytes,
        ),
        timeout_keep_alive=settings.keep_alive_timeout_seconds,
        # max_connections for everything, a few more for /healthz (webui/edge/connections.py)
        limit_concurrency=settings.max_connections + HEALTH_RESERVE,
        proxy_headers=False,  # the app applies X-Forwarded-* from settings.trusted_proxies only
    )
    install_format(settings.log_format)  # uvicorn's handlers exist now (its Config made them)
    server = GracefulServer(
        config,
        app=web_app,
        grace=settings.shutdown_grace_seconds,
        on_started=lambda: _print_lines(started, json_lines=settings.log_format == "json"),
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=claimed.sockets)  # bound above: no other process took the port meanwhile
    if tracing is not None:
        tracing.shutdown()  # the spans still queued are sent
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def _print_lines(lines: list[str], *, json_lines: bool) -> None:
    """The start banner. With JSON logs each line is a JSON object as every log line is
    (logger `steamharness`), so that a log shipper reading the output takes them too."""
    from webui.web.logging import JsonFormatter

    for line in lines:
        if json_lines:
            record = logging.LogRecord("steamharness", logging.INFO, __file__, 0, line, None, None)
            line = JsonFormatter().format(record)
        echo(line)


def _login_hint(engine: Engine) -> str:
    """Which login opens the web UI: the accounts that can log in (a few), or how to make one."""
    from webui.store.accounts import list_accounts

    names = [a.name for a in list_accounts(engine) if a.password_hash and not a.disabled]
    if not names:
        return (
            "no account can log in yet: make one with steamharness users create NAME --admin --password-stdin"
        )
    more = f" (and {len(names) - LOGIN_NAMES} more)" if len(names) > LOGIN_NAMES else ""
    return f"log in with your account: {', '.join(names[:LOGIN_NAMES])}{more}"
