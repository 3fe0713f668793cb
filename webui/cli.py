"""The `steamharness` command. Errors are one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import anyio
import typer
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from webui.blocking import is_busy_error
from webui.errors import ConfigError, SteamharnessError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.workflows.registry import ProjectRegistry
from webui.settings import Settings
from webui.workflows.project import load_project, structure_report

app = typer.Typer(
    name="steamharness",
    help="Serve workflow projects as MCP servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"steamharness: error: {message}", err=True)
    raise typer.Exit(code)


def _absolute(option: str, value: Path | None) -> Path | None:
    if value is not None and not value.is_absolute():
        raise ConfigError(f"{option} must be an absolute path, got {str(value)!r}")
    return value


def _related(values: list[str]) -> dict[str, str]:
    related: dict[str, str] = {}
    for item in values:
        alias, sep, directory = item.partition("=")
        if not sep or not alias.strip() or not directory:
            raise ConfigError(f"--related-project expects ALIAS=/absolute/dir, got {item!r}")
        if not Path(directory).is_absolute():
            raise ConfigError(f"--related-project {alias}: {directory!r} must be an absolute path")
        if not Path(directory).is_dir():
            raise ConfigError(f"--related-project {alias}: {directory} is not a directory")
        if alias in related:
            raise ConfigError(f"--related-project: alias {alias!r} given twice")
        related[alias] = directory
    return related


DirOpt = Annotated[Path | None, typer.Option(help="Absolute directory.", show_default=False)]


@app.command("mcp")
def mcp_command(
    workflow_dir: Annotated[Path, typer.Argument(help="The workflow project folder.")],
    data_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="STEAMHARNESS_DATA_DIR", help="Data root (default ~/.steamharness).", show_default=False
        ),
    ] = None,
    file_store_dir: Annotated[Path | None, typer.Option(envvar="STEAMHARNESS_FILE_STORE_DIR")] = None,
    kv_store_dir: Annotated[Path | None, typer.Option(envvar="STEAMHARNESS_KV_STORE_DIR")] = None,
    persistent_value_store_dir: Annotated[
        Path | None, typer.Option(envvar="STEAMHARNESS_PERSISTENT_VALUE_STORE_DIR")
    ] = None,
    file_create_store_dir: Annotated[
        Path | None, typer.Option(envvar="STEAMHARNESS_FILE_CREATE_STORE_DIR")
    ] = None,
    auth_dir: Annotated[Path | None, typer.Option(envvar="STEAMHARNESS_AUTH_DIR")] = None,
    related_project: Annotated[
        list[str] | None, typer.Option(help="ALIAS=/absolute/project/dir (repeatable).", show_default=False)
    ] = None,
) -> None:
    """Serve a workflow project's entrypoints as MCP tools over stdio."""
    from webui.mcp.stdio import serve_stdio
    from webui.runs.isolation import harden_process

    try:
        options = {
            "data_dir": _absolute("--data-dir", data_dir),
            "file_store_dir": _absolute("--file-store-dir", file_store_dir),
            "kv_store_dir": _absolute("--kv-store-dir", kv_store_dir),
            "persistent_value_store_dir": _absolute(
                "--persistent-value-store-dir", persistent_value_store_dir
            ),
            "file_create_store_dir": _absolute("--file-create-store-dir", file_create_store_dir),
            "auth_dir": _absolute("--auth-dir", auth_dir),
        }
        related = _related(related_project or [])
        values: dict[str, object] = {k: v for k, v in options.items() if v is not None}
        # The admin key in this environment is for handlers to call a server with; the
        # stdio host itself never accepts it, so it is not validated as a server secret.
        values["server_admin_key"] = None
        settings = Settings.model_validate(values)
        project = load_project(workflow_dir.expanduser().resolve())
    except SteamharnessError as exc:
        fail(exc.message)
    except ValueError as exc:  # settings validation
        fail(_first_error(exc))
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="steamharness: %(levelname)s %(message)s"
    )
    harden_process()
    try:
        anyio.run(serve_stdio, settings, project, related)
    except SteamharnessError as exc:
        fail(exc.message)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command("structure")
def structure_command(
    workflow_dir: Annotated[Path, typer.Argument(help="The workflow project folder.")],
) -> None:
    """Print a project's structure report (entrypoints and static params) as JSON."""
    try:
        project = load_project(workflow_dir.expanduser().resolve())
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(json.dumps(structure_report(project), indent=2, ensure_ascii=False))


# ---------------------------------------------------------------------- server side

DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="STEAMHARNESS_DATA_DIR",
        help="Data root (default ~/.steamharness).",
        show_default=False,
    ),
]
DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="STEAMHARNESS_DATABASE_URL",
        help="Any SQLAlchemy URL (default: SQLite in the data dir).",
        show_default=False,
    ),
]


def _settings(data_dir: Path | None, database_url: str | None, **extra: object) -> Settings:
    values: dict[str, object] = {k: v for k, v in extra.items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir.expanduser().resolve()
    if database_url is not None:
        values["database_url"] = database_url
    try:
        return Settings.model_validate(values)
    except ValueError as exc:
        fail(_first_error(exc))


def _first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", exc)).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(exc).splitlines()[0]


def _store(settings: Settings) -> tuple[Engine, ProjectRegistry]:
    from webui.store.db import make_engine, private_dir
    from webui.workflows.registry import ProjectRegistry

    private_dir(settings.data_dir)
    engine = make_engine(settings.resolved_database_url)
    return engine, ProjectRegistry(engine, settings.versions_dir)


def examples_dir() -> Path:
    override = os.environ.get("STEAMHARNESS_EXAMPLES_DIR")
    candidates = [Path(override)] if override else []
    candidates += [Path(__file__).resolve().parent.parent / "examples", Path.cwd() / "examples"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    fail("the bundled examples were not found (set STEAMHARNESS_EXAMPLES_DIR)")


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(envvar="STEAMHARNESS_HOST", help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="STEAMHARNESS_PORT", help="Port.")] = 8000,
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
            envvar="STEAMHARNESS_ROOT",
            help="Root config folder of the MCP servers the host connects to (default: the data dir).",
            show_default=False,
        ),
    ] = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Register the bundled examples; print a login and key.")
    ] = False,
) -> None:
    """Run the server: Streamable HTTP MCP per project, JSON API, web UI."""
    import uvicorn

    from webui.admin import setup_demo
    from webui.app import create_app
    from webui.runs.isolation import harden_process, worker_user
    from webui.store.projects import list_projects
    from webui.web.connections import with_header_timeout

    dirs = [d.expanduser().resolve() for d in projects_dir or []]
    for d in dirs:
        if not d.is_dir():
            fail(f"--projects-dir {d}: not a directory")
    settings = _settings(
        data_dir,
        database_url,
        host=host,
        port=port,
        projects_dirs=dirs or None,
        root_dir=root.expanduser().resolve() if root else None,
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(
            f"steamharness: warning: listening on {host}, not loopback; put TLS in front, set allowed hosts",
            err=True,
        )
    try:
        worker_user(settings.worker_user)  # a missing worker user stops the server here
        engine, registry = _store(settings)
        for d in dirs:
            registry.register_dir(d)
        if demo:
            user, password, key = setup_demo(engine, registry, examples_dir())
            base = f"http://{host}:{port}"
            typer.echo(f"demo login: {user} / {password}")
            typer.echo(f"demo API key: {key}")
            for record in list_projects(engine):
                typer.echo(f"  {record.name}: {base}/api/workflows/{record.id}/mcp?target=latest")
        engine.dispose()
    except SteamharnessError as exc:
        fail(exc.message)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    harden_process()
    from uvicorn.config import STARTUP_FAILURE

    from webui.shutdown import GracefulServer

    web_app = create_app(settings)
    config = uvicorn.Config(
        web_app,
        host=host,
        port=port,
        log_level="info",
        http=with_header_timeout(settings.header_timeout_seconds),
        timeout_keep_alive=settings.keep_alive_timeout_seconds,
        limit_concurrency=settings.max_connections,
        proxy_headers=False,  # the app applies X-Forwarded-* from settings.trusted_proxies only
    )
    server = GracefulServer(config, app=web_app, grace=settings.shutdown_grace_seconds)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


projects_app = typer.Typer(help="Register, publish and take offline workflow projects.", no_args_is_help=True)
users_app = typer.Typer(help="Accounts.", no_args_is_help=True)
keys_app = typer.Typer(help="Account API keys (shown once, stored hashed).", no_args_is_help=True)
app.add_typer(projects_app, name="projects")
app.add_typer(users_app, name="users")
app.add_typer(keys_app, name="keys")


@projects_app.command("list")
def projects_list(data_dir: DataDirOpt = None, database_url: DatabaseOpt = None) -> None:
    """List registered projects with their versions."""
    from webui.store import projects as project_store

    engine, registry = _store(_settings(data_dir, database_url))
    rows = []
    for record in project_store.list_projects(engine):
        versions = project_store.list_versions(engine, project_id=record.id)
        latest = registry.online_versions(record.id)
        rows.append(
            {
                "id": record.id,
                "name": record.name,
                "root": record.root,
                "latest": latest[0].version if latest else None,
                "versions": {v.version: v.status for v in versions},
                "runGateOpen": record.run_gate_open,
            }
        )
    typer.echo(json.dumps(rows, indent=2))


@projects_app.command("add")
def projects_add(
    directory: Annotated[Path, typer.Argument(help="The project folder.")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Register a project folder (its working tree is the draft). Harmless if already registered."""
    _, registry = _store(_settings(data_dir, database_url))
    try:
        project, created = registry.register(directory)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"{'registered' if created else 'already registered'}: {project.name} {project.id}", err=True)
    typer.echo(project.id)


@projects_app.command("publish")
def projects_publish(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    version: Annotated[str | None, typer.Option(help="X.Y.Z (default: package.json version).")] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Snapshot the draft as an immutable, online version."""
    _, registry = _store(_settings(data_dir, database_url))
    try:
        row = registry.publish(project_id, version, actor="cli")
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"published {project_id} {row.version} ({row.revision})", err=True)
    typer.echo(row.version)


def _set_online(
    project_id: str, version: str, online: bool, data_dir: Path | None, database_url: str | None
) -> None:
    _, registry = _store(_settings(data_dir, database_url))
    try:
        registry.set_online(project_id, version, online)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"{project_id} {version} is {'online' if online else 'offline'}", err=True)


@projects_app.command("offline")
def projects_offline(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    version: Annotated[str, typer.Argument(metavar="VERSION")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Take a version offline (latest moves to the newest online one)."""
    _set_online(project_id, version, False, data_dir, database_url)


@projects_app.command("online")
def projects_online(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    version: Annotated[str, typer.Argument(metavar="VERSION")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Bring an offline version back online."""
    _set_online(project_id, version, True, data_dir, database_url)


@projects_app.command("gate")
def projects_gate(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    state: Annotated[str, typer.Argument(metavar="open|close", help="Accept new runs, or refuse them.")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Open or close a project's run gate (a closed gate refuses new runs, creates none)."""
    if state not in ("open", "close"):
        fail(f"expected 'open' or 'close', not {state!r}")
    _, registry = _store(_settings(data_dir, database_url))
    try:
        registry.set_limits(project_id, run_gate_open=state == "open")
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"{project_id}: run gate {'open' if state == 'open' else 'closed'}", err=True)


@projects_app.command("limits")
def projects_limits(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    max_running: Annotated[int | None, typer.Option(min=1, help="Runs holding a worker at once.")] = None,
    max_queued: Annotated[int | None, typer.Option(min=0, help="Runs waiting for a slot.")] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Set a project's queue limits (checked before every tool call)."""
    _, registry = _store(_settings(data_dir, database_url))
    changes = {
        k: v for k, v in {"max_running": max_running, "max_queued": max_queued}.items() if v is not None
    }
    if not changes:
        fail("give --max-running and/or --max-queued")
    try:
        registry.set_limits(project_id, **changes)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"{project_id}: {', '.join(f'{k}={v}' for k, v in changes.items())}", err=True)


@users_app.command("create")
def users_create(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    admin: Annotated[bool, typer.Option("--admin", help="Administrator.")] = False,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create an account (without a password it can only use API keys)."""
    from webui.admin import create_user

    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else None
    engine, _ = _store(_settings(data_dir, database_url))
    try:
        create_user(engine, name=name, admin=admin, password=password)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"created user {name}{' (admin)' if admin else ''}", err=True)


@users_app.command("grant")
def users_grant(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    project: Annotated[
        list[str] | None, typer.Option("--project", help="Project id (repeatable).", show_default=False)
    ] = None,
    all_projects: Annotated[bool, typer.Option("--all", help="Every registered project.")] = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Give a (non-admin) account run permission on projects."""
    from webui.admin import grant_projects
    from webui.store.projects import list_projects

    engine, registry = _store(_settings(data_dir, database_url))
    ids = [r.id for r in list_projects(engine)] if all_projects else list(project or [])
    if not ids:
        fail("give --project ID (repeatable) or --all")
    try:
        added = grant_projects(engine, user=name, projects=ids, registry=registry)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"{name}: granted {len(added)} project(s)", err=True)


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option("--user", help="Account name.")],
    project: Annotated[
        list[str] | None,
        typer.Option("--project", help="Project id (repeatable; default all).", show_default=False),
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option("--scope", help="runs.create (default) or runs.read.", show_default=False),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A label.")] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create an API key. The raw key is printed once, alone on stdout."""
    from webui.admin import create_key

    engine, registry = _store(_settings(data_dir, database_url))
    try:
        raw, key = create_key(engine, user=user, projects=project, scopes=scope, name=name, registry=registry)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(
        f"created {key.id} for {user}: scopes {', '.join(key.scopes)}; projects "
        f"{', '.join(key.projects) if key.projects else 'all'}. The key is shown once:",
        err=True,
    )
    typer.echo(raw)


@keys_app.command("list")
def keys_list(data_dir: DataDirOpt = None, database_url: DatabaseOpt = None) -> None:
    """List keys (ids and metadata, never secrets)."""
    from webui.store import accounts as account_store

    engine, _ = _store(_settings(data_dir, database_url))
    rows = [
        {
            "id": key.id,
            "user": account.name,
            "name": key.name,
            "scopes": key.scopes,
            "projects": key.projects,
            "createdAt": key.created_at.isoformat(),
            "revokedAt": key.revoked_at.isoformat() if key.revoked_at else None,
        }
        for key, account in account_store.list_keys(engine)
    ]
    typer.echo(json.dumps(rows, indent=2))


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(metavar="KEY_ID")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Revoke a key; a running server refuses it on the very next request."""
    from webui.admin import revoke_key

    engine, _ = _store(_settings(data_dir, database_url))
    try:
        revoke_key(engine, key_id=key_id)
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(f"revoked {key_id}", err=True)


config_app = typer.Typer(help="The host's MCP server configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("validate")
def config_validate(
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            envvar=["STEAMHARNESS_ROOT", "STEAMHARNESS_DATA_DIR"],
            help="Root config folder (config.yaml, mcp/); default the data dir, ~/.steamharness.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Check config.yaml and mcp/ server files without connecting: one line per problem."""
    from webui.host.config import HostConfigError, load_host_config
    from webui.settings import default_data_dir

    folder = (root or default_data_dir()).expanduser().resolve()
    try:
        config = load_host_config(folder, os.environ)
    except HostConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"steamharness: error: {problem}", err=True)
        raise typer.Exit(1) from None
    defaults = ", ".join(config.default_servers) or "none"
    typer.echo(
        f"steamharness: config ok: {len(config.servers)} MCP server(s) in {folder}; defaults: {defaults}",
        err=True,
    )


def main() -> None:
    try:
        app()
    except OperationalError as exc:
        # Another process (a running server mid-write, a backup) holds the database lock
        # longer than the busy timeout: one line, not a traceback.
        message = (
            "the database is busy (another process is writing); try again in a moment"
            if is_busy_error(exc)
            else f"database error: {exc.orig}"
        )
        typer.echo(f"steamharness: error: {message}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
