"""What every `steamharness` command shares: the one-line failure, the data-dir and
database options, and building Settings and the store from them; terminal-safe output
(`terminal_safe`, from `webui.terminal_text`, and `json_text`, `highlighted`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final, NoReturn

import typer
from pydantic import AliasChoices, ValidationError

from webui.errors import ConfigError
from webui.settings import Settings
from webui.terminal_text import BIDI, TerminalText, terminal_safe

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.audit.log import AuditLog
    from webui.projects.registry import ProjectRegistry


# In JSON text the characters a terminal acts on (webui.terminal_text), and the line
# separators some readers split lines at, as JSON escapes: the same JSON value (json.dumps
# escapes the C0 controls itself).
_JSON_ESCAPES: Final = {c: f"\\u{c:04x}" for c in [*range(0x7F, 0xA0), *BIDI, 0x2028, 0x2029]}


def json_text(data: object, *, indent: int | None = 2, sort_keys: bool = False) -> TerminalText:
    """`data` as JSON that is safe in a terminal and one line to every reader when `indent` is
    None (NDJSON): non-ASCII text stays readable, the characters a terminal acts on are escaped."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=sort_keys)
    return TerminalText(text.translate(_JSON_ESCAPES))


def highlighted(text: str, spans: list[list[int]], marks: tuple[str, str]) -> TerminalText:
    """`text` on one line, terminal-safe, with each span (`[start, end)` in `text`) between `marks`
    (this program's own: brackets, or a terminal's bold)."""
    out, at = [], 0
    for start, end in sorted((int(a), int(b)) for a, b in spans):
        if start < at or end > len(text) or start >= end:
            continue
        out += [_collapsed(text[at:start]), marks[0], _collapsed(text[start:end]), marks[1]]
        at = end
    out.append(_collapsed(text[at:]))
    return TerminalText("".join(out).strip())


def _collapsed(piece: str) -> str:
    """Each run of whitespace one space, the rest terminal-safe."""
    words = piece.split()
    if not words:
        return " " if piece else ""
    lead = " " if piece[0].isspace() else ""
    trail = " " if piece[-1].isspace() else ""
    return terminal_safe(f"{lead}{' '.join(words)}{trail}")


def echo(*parts: str, err: bool = False, nl: bool = True) -> None:
    """Print `parts` on stdout (`err`: stderr), each made terminal-safe unless it is already: the
    one way every command writes, so that no stored text reaches a terminal as controls."""
    typer.echo("".join(terminal_safe(p) for p in parts), err=err, nl=nl)


def fail(message: str, code: int = 2) -> NoReturn:
    echo(f"steamharness: error: {message}", err=True)
    raise typer.Exit(code)


def fail_all(problems: Sequence[str], code: int = 2) -> NoReturn:
    """Every problem at once, one `steamharness: error:` line each (a project's, for the
    person who fixes them all before the next try)."""
    for problem in problems:
        echo(f"steamharness: error: {problem}", err=True)
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
    folder given (by option or environment) are made absolute, and a password in
    `database_url` is hidden from this process's command line first."""
    hide_database_password(database_url)
    settings = load_settings({"data_dir": data_dir, "database_url": database_url, **extra})
    given = settings.model_fields_set
    resolved = {
        name: path.expanduser().resolve()
        for name in ("data_dir", "root_dir")
        if name in given and (path := getattr(settings, name)) is not None
    }
    return settings.model_copy(update=resolved)


def hide_database_password(database_url: str | None) -> None:
    """A password in --database-url is overwritten in this process's command line, which
    every process on the machine may read: workflow code (a run's, or a handler file the
    project check imports in its child, as the worker user under root) included
    (`webui.cli.argv`)."""
    from urllib.parse import urlsplit

    from webui.cli.argv import hide_in_cmdline

    if not database_url:
        return
    try:
        password = urlsplit(database_url).password
    except ValueError:
        return  # not a URL: the settings refuse it with their own words
    if password and not hide_in_cmdline(password):
        echo(
            "warning: the --database-url password stays readable in this process's command line"
            " (ps, /proc); give it in STEAMHARNESS_DATABASE_URL instead",
            err=True,
        )


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
    return engine, ProjectRegistry(engine, settings.versions_dir, settings=settings)


def cli_audit() -> AuditLog:
    """The audit log of a CLI command: its events commit with each change; no live audit tail
    runs in this process to wake (a running server's tail reads them from the database)."""
    from webui.audit.log import AuditLog

    return AuditLog()
