"""The `steamharness` command: the root app and its entry point. Each sub-app and top-level
command lives in a module of its own; errors are one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import sys

import typer

from webui.cli import (
    configs,
    db,
    host,
    keys,
    knowledge,
    login,
    logout,
    mcp,
    projects,
    serve,
    structure,
    users,
)
from webui.cli.common import echo
from webui.errors import SteamharnessError

app = typer.Typer(
    name="steamharness",
    help="Serve workflow projects as MCP servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("mcp")(mcp.mcp_command)
app.command("structure")(structure.structure_command)
app.command("serve")(serve.serve_command)
app.command("login")(login.login_command)
app.command("logout")(logout.logout_command)
app.add_typer(projects.app, name="projects")
app.add_typer(users.app, name="users")
app.add_typer(keys.app, name="keys")
app.add_typer(host.app, name="host")
app.add_typer(host.alias, name="config", hidden=True)  # the old name of `host`
app.add_typer(configs.app, name="configs")
app.add_typer(db.app, name="db")
app.add_typer(knowledge.app, name="knowledge")


def main() -> None:
    try:
        app()
    except SteamharnessError as exc:  # what a command reports on purpose: its message, one line
        echo(f"steamharness: error: {exc.message}", err=True)
        raise SystemExit(2) from None
    except Exception as exc:
        # SQLAlchemy is imported only by the commands that open the database (not by
        # `--help` or `mcp`): an error of its can only come from one of those.
        if "sqlalchemy" not in sys.modules:
            raise
        from sqlalchemy.exc import OperationalError

        from webui.blocking import is_busy_error

        if not isinstance(exc, OperationalError):
            raise
        # Another process (a running server mid-write, a backup) holds the database lock
        # longer than the busy timeout: one line, not a traceback.
        message = (
            "the database is busy (another process is writing); try again in a moment"
            if is_busy_error(exc)
            else f"database error: {exc.orig}"
        )
        echo(f"steamharness: error: {message}", err=True)
        raise SystemExit(2) from None


__all__ = ["app", "main"]
