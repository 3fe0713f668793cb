"""What every `steamharness` command shares: the one-line failure, the data-dir and
database options, and building Settings and the store from them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from pydantic import ValidationError

from webui.errors import ConfigError
from webui.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.workflows.registry import ProjectRegistry


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"steamharness: error: {message}", err=True)
    raise typer.Exit(code)


def absolute(option: str, value: Path | None) -> Path | None:
    if value is not None and not value.is_absolute():
        raise ConfigError(f"{option} must be an absolute path, got {str(value)!r}")
    return value


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


def server_settings(data_dir: Path | None, database_url: str | None, **extra: object) -> Settings:
    values: dict[str, object] = {k: v for k, v in extra.items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir.expanduser().resolve()
    if database_url is not None:
        values["database_url"] = database_url
    try:
        return Settings.model_validate(values)
    except ValueError as exc:
        fail(first_error(exc))


def first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", exc)).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(exc).splitlines()[0]


def open_store(settings: Settings) -> tuple[Engine, ProjectRegistry]:
    from webui.store.db import make_engine, private_dir
    from webui.workflows.registry import ProjectRegistry

    private_dir(settings.data_dir)
    engine = make_engine(settings.resolved_database_url)
    return engine, ProjectRegistry(engine, settings.versions_dir)
