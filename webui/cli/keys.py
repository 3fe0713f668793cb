"""`steamharness keys …`: create, list and revoke account API keys."""

from __future__ import annotations

from typing import Annotated

import typer

from webui.cli.common import DatabaseOpt, DataDirOpt, cli_audit, echo, json_text, open_store, server_settings

app = typer.Typer(help="Account API keys (shown once, stored hashed).", no_args_is_help=True)


@app.command("create")
def keys_create(
    user: Annotated[str, typer.Option("--user", help="Account name.")],
    project: Annotated[
        list[str] | None,
        typer.Option("--project", help="Project id (repeatable; default all).", show_default=False),
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="runs.create (default), runs.read, configs or knowledge (repeatable).",
            show_default=False,
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A label.")] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create an API key. The raw key is printed once, alone on stdout."""
    from webui.admin import create_key

    settings = server_settings(data_dir, database_url)
    engine, registry = open_store(settings)
    raw, key = create_key(
        engine,
        user=user,
        projects=project,
        scopes=scope,
        name=name,
        registry=registry,
        audit=cli_audit(),
        max_keys=settings.max_keys_per_account,
    )
    echo(
        f"created {key.id} for {user}: scopes {', '.join(key.scopes)}; projects "
        f"{', '.join(key.projects) if key.projects else 'all'}. The key is shown once:",
        err=True,
    )
    echo(raw)


@app.command("list")
def keys_list(data_dir: DataDirOpt = None, database_url: DatabaseOpt = None) -> None:
    """List keys (ids and metadata, never secrets)."""
    from webui.store import accounts as account_store

    engine, _ = open_store(server_settings(data_dir, database_url))
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
    echo(json_text(rows))


@app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(metavar="KEY_ID")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Revoke a key; a running server refuses it on the very next request."""
    from webui.admin import revoke_key

    engine, _ = open_store(server_settings(data_dir, database_url))
    revoke_key(engine, key_id=key_id, audit=cli_audit())
    echo(f"revoked {key_id}", err=True)
