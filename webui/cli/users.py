"""`steamharness users …`: create accounts and grant them projects."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from webui.cli.common import DatabaseOpt, DataDirOpt, cli_audit, echo, fail, open_store, server_settings

app = typer.Typer(help="Accounts.", no_args_is_help=True)


@app.command("create")
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
    engine, _ = open_store(server_settings(data_dir, database_url))
    create_user(engine, name=name, admin=admin, password=password, audit=cli_audit())
    echo(f"created user {name}{' (admin)' if admin else ''}", err=True)


@app.command("grant")
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

    engine, registry = open_store(server_settings(data_dir, database_url))
    ids = [r.id for r in list_projects(engine)] if all_projects else list(project or [])
    if not ids:
        fail("give --project ID (repeatable) or --all")
    added = grant_projects(engine, user=name, projects=ids, registry=registry, audit=cli_audit())
    echo(f"{name}: granted {len(added)} project(s)", err=True)
