"""What every `steamharness` command shares: the one-line failure, the data-dir and
database options, and building Settings and the store from them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from pydantic import AliasChoices, ValidationError

from webui.errors import ConfigError
from webui.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.audit.log import AuditLog
    from webui.projects.registry import ProjectRegistry


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"steamharness: error: {message}", err=True)
    raise typer.Exit(code)


def absolute(option: str, value: Path | None) -> Path | None:
    if value is not None and not value.is_absolute():
        raise ConfigError(f"{option} must be an absolute path, got {str(value)!r}")
    return value


def env_var(field: str) -> str:
    """The environment variable Settings reads `field` from (the first, when it has several)."""
    prefix = Settings.model_config.get("env_prefix", "")
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return next(c for c in alias.choices if isinstance(c, str) and c.startswith(prefix))
    return f"{prefix}{field}".upper()


def setting_help(text: str, *fields: str, show_default: bool = False) -> str:
    """The help of an option that overrides settings: it names their environment variables (and
    the default) as Settings declares them. The option itself reads no environment."""
    # Typer renders help as rich markup, where an unescaped "[" opens a style tag.
    notes = [rf"\[env var: {', '.join(env_var(f) for f in fields)}]"]
    if show_default:
        notes.append(rf"\[default: {Settings.model_fields[fields[0]].default}]")
    return " ".join([text, *notes]).strip()


DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help=setting_help("Data root (default ~/.steamharness).", "data_dir"),
        show_default=False,
    ),
]
DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help=setting_help("Any SQLAlchemy URL (default: SQLite in the data dir).", "database_url"),
        show_default=False,
    ),
]


def load_settings(options: dict[str, object], *, admin_key: bool = True) -> Settings:
    """Settings from the environment, with the options that were given on top (an option left
    out keeps its setting's environment variable or default). A bad value fails in one line.
    Without `admin_key` the server admin key in the environment is neither read nor checked."""
    values: dict[str, object] = {k: v for k, v in options.items() if v is not None}
    if not admin_key:
        values["server_admin_key"] = None
    try:
        return Settings.model_validate(values)
    except ValueError as exc:
        fail(first_error(exc))


def server_settings(data_dir: Path | None, database_url: str | None, **extra: object) -> Settings:
    """Settings for the commands that open the server's data dir; the data dir and root
    folder given (by option or environment) are made absolute."""
    settings = load_settings({"data_dir": data_dir, "database_url": database_url, **extra})
    given = settings.model_fields_set
    resolved = {
        name: path.expanduser().resolve()
        for name in ("data_dir", "root_dir")
        if name in given and (path := getattr(settings, name)) is not None
    }
    return settings.model_copy(update=resolved)


def first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", exc)).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(exc).splitlines()[0]


def open_store(settings: Settings) -> tuple[Engine, ProjectRegistry]:
    """The store of the data dir, which must be at the newest schema revision (a new SQLite
    database is created at it); this never alters a schema (`db upgrade` and `serve` do)."""
    from webui.projects.registry import ProjectRegistry
    from webui.store.db import make_engine, private_dir

    private_dir(settings.data_dir)
    engine = make_engine(settings.resolved_database_url)
    return engine, ProjectRegistry(engine, settings.versions_dir)


def cli_audit() -> AuditLog:
    """The audit log of a CLI command: its events commit with each change; no live audit tail
    runs in this process to wake (a running server's tail reads them from the database)."""
    from webui.audit.log import AuditLog

    return AuditLog()
