"""`steamharness db`: the database's schema revision. `upgrade` applies what is pending (the
only command besides `serve` that changes a schema); `current` tells where each database
stands and exits 1 when one is not at the newest revision."""

from __future__ import annotations

import typer

from webui.cli.common import DatabaseOpt, DataDirOpt, echo, server_settings
from webui.settings import Settings

app = typer.Typer(help="The database schema: upgrade it, or show its revision.", no_args_is_help=True)


def shown(url: str) -> str:
    """A database URL without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def upgrade_all(settings: Settings) -> list[tuple[str, list[str]]]:
    """Every database of the data dir brought to head; per database, what was done."""
    from webui.services import database_urls
    from webui.store.db import make_engine, private_dir
    from webui.store.schema import upgrade_database

    private_dir(settings.data_dir)
    results: list[tuple[str, list[str]]] = []
    for url in database_urls(settings):
        engine = make_engine(url, busy_timeout=settings.db_busy_timeout_seconds, check_schema=False)
        try:
            results.append((shown(url), upgrade_database(engine)))
        finally:
            engine.dispose()
    return results


@app.command("upgrade")
def upgrade_command(data_dir: DataDirOpt = None, database_url: DatabaseOpt = None) -> None:
    """Apply the pending migrations (a data dir made before migrations is brought up first)."""
    from webui.store.migrations import HEAD

    for where, done in upgrade_all(server_settings(data_dir, database_url)):
        if not done:
            echo(f"{where}: already at {HEAD} (head)")
            continue
        for line in done:
            echo(f"{where}: {line}")
        echo(f"{where}: now at {HEAD} (head)")


@app.command("current")
def current_command(data_dir: DataDirOpt = None, database_url: DatabaseOpt = None) -> None:
    """Print each database's revision and whether it is the newest; exit 1 when one is behind."""
    from webui.services import database_urls
    from webui.store.db import make_engine, private_dir
    from webui.store.migrations import HEAD
    from webui.store.schema import read_state

    settings = server_settings(data_dir, database_url)
    private_dir(settings.data_dir)
    behind = False
    for url in database_urls(settings):
        engine = make_engine(url, busy_timeout=settings.db_busy_timeout_seconds, check_schema=False)
        try:
            with engine.connect() as conn:
                state = read_state(conn)
        finally:
            engine.dispose()
        if state.revision == HEAD:
            echo(f"{shown(url)}: {HEAD} (head)")
            continue
        behind = True
        echo(f"{shown(url)}: {state.describe()}; this release needs {HEAD}: run `steamharness db upgrade`")
    if behind:
        raise typer.Exit(1)
