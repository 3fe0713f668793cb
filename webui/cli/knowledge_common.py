"""What the `steamharness knowledge` commands share (webui.cli.knowledge): their arguments and
options, the knowledge base and project a command works on (`open_target`), JSON options and
output, and one-line errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from webui import strict_json
from webui.cli.common import (
    cli_audit,
    echo,
    json_text,
    load_settings,
    open_store,
    server_settings,
)
from webui.cli.configs import UUID_RE
from webui.errors import ConfigError, KnowledgeRefused

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.audit.log import AuditLog
    from webui.knowledge.model import Actor
    from webui.knowledge.service import KnowledgeService

ERROR: Final = "steamharness: error: "
BOLD: Final = ("\x1b[1m", "\x1b[0m")
BRACKETS: Final = ("[[", "]]")

ProjectArg = Annotated[
    str,
    typer.Argument(
        metavar="PROJECT",
        help="A project folder (its local knowledge base) or a registered project's id (the server's).",
        show_default=False,
    ),
]
CollectionArg = Annotated[
    str, typer.Argument(metavar="COLLECTION", help="Collection name.", show_default=False)
]
CollectionOpt = Annotated[
    str | None, typer.Option("--collection", help="Only this collection.", show_default=False)
]
FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter",
        metavar="JSON",
        help='Metadata filter: {"key": value} or {"key": [value, ...]}; every key must match.',
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the service's JSON instead of text.")]
ValuesDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--persistent-value-store-dir",
        help="Keep the knowledge base in values.sqlite3 in this folder (as `mcp` does)."
        r" \[env var: STEAMHARNESS_PERSISTENT_VALUE_STORE_DIR]",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Target:
    """The service and the project a command works on; `main`: the main store (audit)."""

    service: KnowledgeService
    project_id: str
    main: Engine
    audit: AuditLog


def open_target(
    project: str, data_dir: Path | None, database_url: str | None, values_dir: Path | None
) -> Target:
    from webui.services import knowledge_service
    from webui.store.db import make_engine, private_dir, sqlite_url
    from webui.workflows.package_json import parse_id, read_package_json

    options: dict[str, object] = {"persistent_value_store_dir": values_dir}
    folder = Path(project).expanduser()
    if folder.exists():
        path, package = read_package_json(folder.resolve())
        project_id = parse_id(package.get("id"), str(path))
        settings = load_settings(
            {"data_dir": data_dir, "database_url": database_url, **options}, admin_key=False
        )
        settings = settings.model_copy(update={"data_dir": settings.data_dir.expanduser().resolve()})
        private_dir(settings.data_dir)
        main = make_engine(settings.resolved_database_url, busy_timeout=settings.db_busy_timeout_seconds)
    elif UUID_RE.fullmatch(project):
        settings = server_settings(data_dir, database_url, **options)
        main, registry = open_store(settings)
        project_id = project.lower()
        registry.record(project_id)  # a project that is not registered: NotFound
    else:
        raise ConfigError(
            f"PROJECT {project!r} is neither an existing project folder nor a project id (a UUID)"
        )
    engine = main
    if settings.persistent_value_store_dir is not None:
        where = settings.persistent_value_store_dir.expanduser().resolve()
        engine = make_engine(
            sqlite_url(where / "values.sqlite3"), busy_timeout=settings.db_busy_timeout_seconds
        )
    audit = cli_audit()
    return Target(knowledge_service(settings, engine, main, audit), project_id, main, audit)


def cli_actor() -> Actor:
    from webui.knowledge.model import Actor

    return Actor(actor="cli", source="cli")


def json_option(option: str, raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return strict_json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KnowledgeRefused(f"{option}: not JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # a duplicate key, NaN, nested too deep
        raise KnowledgeRefused(f"{option}: not acceptable JSON ({exc})") from None


def filter_json(raw: str | None) -> Any:
    value = json_option("--filter", raw)
    if value is not None and not isinstance(value, dict):
        raise KnowledgeRefused('--filter: a filter is a JSON object: {"key": value} or {"key": [value, ...]}')
    return value


def print_json(data: Any) -> None:
    echo(json_text(data))


def error_line(message: str) -> None:
    echo(f"{ERROR}{' '.join(message.split())}", err=True)
