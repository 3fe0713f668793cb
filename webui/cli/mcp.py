"""`steamharness mcp`: serve one workflow project's entrypoints as MCP tools over stdio."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    absolute,
    fail,
    first_error,
    hide_database_password,
    load_settings,
    setting_help,
)
from webui.errors import ConfigError, SteamharnessError
from webui.files.created import prepare_dir
from webui.terminal_text import install_terminal_safe

# The folders this command takes, each an option and a setting; all must be absolute.
ABSOLUTE_DIRS = (
    "data_dir",
    "file_store_dir",
    "kv_store_dir",
    "persistent_value_store_dir",
    "file_create_store_dir",
    "auth_dir",
)


def related_projects(values: list[str]) -> dict[str, str]:
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


def _dir_option(field: str) -> Any:
    return typer.Option(help=setting_help("", field))


def mcp_command(
    workflow_dir: Annotated[Path, typer.Argument(help="The workflow project folder.")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    file_store_dir: Annotated[Path | None, _dir_option("file_store_dir")] = None,
    kv_store_dir: Annotated[Path | None, _dir_option("kv_store_dir")] = None,
    persistent_value_store_dir: Annotated[Path | None, _dir_option("persistent_value_store_dir")] = None,
    file_create_store_dir: Annotated[Path | None, _dir_option("file_create_store_dir")] = None,
    auth_dir: Annotated[Path | None, _dir_option("auth_dir")] = None,
    related_project: Annotated[
        list[str] | None,
        typer.Option(
            help="ALIAS=/absolute/project/dir: a project named in relatedProjects that names this one"
            " back, for ctx.related[ALIAS] (repeatable).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            help="The local configuration tool calls run with (default: the active one at each call).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve a workflow project's entrypoints as MCP tools over stdio."""
    # The serving stack's imports create most of the objects this process will ever hold,
    # all of them for its lifetime: collecting cycles while they pile up is ~15% of the
    # start to the first answer. The collector is off while they load, and what they made is
    # frozen (out of every later collection's scan) before it is back on.
    gc.disable()
    try:
        from webui.mcp.stdio import serve_stdio
        from webui.runs.isolation import harden_process
        from webui.workflows.project import read_or_problem
    finally:
        gc.freeze()
        gc.enable()

    # The admin key in this environment is for handlers to call a server with; the stdio
    # host itself never accepts it, so it is not validated as a server secret.
    options: dict[str, object] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "file_store_dir": file_store_dir,
        "kv_store_dir": kv_store_dir,
        "persistent_value_store_dir": persistent_value_store_dir,
        "file_create_store_dir": file_create_store_dir,
        "auth_dir": auth_dir,
    }
    hide_database_password(database_url)  # the project check's child may read the command line
    settings = load_settings(options, admin_key=False)
    try:
        for field in ABSOLUTE_DIRS:
            absolute(f"--{field.replace('_', '-')}", getattr(settings, field))
        if settings.file_create_store_dir is not None:
            prepare_dir(settings.file_create_store_dir, "--file-create-store-dir")
        related = related_projects(related_project or [])
        # A project with problems is still served (they answer every call); a folder that is
        # no workflow project at all fails here.
        reading = read_or_problem(workflow_dir.expanduser().resolve())
    except SteamharnessError as exc:
        fail(exc.message)
    except ValueError as exc:
        fail(first_error(exc))
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="steamharness: %(levelname)s %(message)s"
    )
    if settings.log_format == "json":  # imported only then: the text format keeps start-up lean
        from webui.web.logging import install_format

        install_format("json")
    else:
        install_terminal_safe(logging.getLogger().handlers)
    harden_process()
    try:
        anyio.run(serve_stdio, settings, reading, related, config)
    except SteamharnessError as exc:
        fail(exc.message)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
