"""`steamharness mcp`: serve one workflow project's entrypoints as MCP tools over stdio."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import anyio
import typer

from webui.cli.common import absolute, fail, first_error
from webui.errors import ConfigError, SteamharnessError
from webui.settings import Settings
from webui.workflows.project import load_project


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
            "data_dir": absolute("--data-dir", data_dir),
            "file_store_dir": absolute("--file-store-dir", file_store_dir),
            "kv_store_dir": absolute("--kv-store-dir", kv_store_dir),
            "persistent_value_store_dir": absolute(
                "--persistent-value-store-dir", persistent_value_store_dir
            ),
            "file_create_store_dir": absolute("--file-create-store-dir", file_create_store_dir),
            "auth_dir": absolute("--auth-dir", auth_dir),
        }
        related = related_projects(related_project or [])
        values: dict[str, object] = {k: v for k, v in options.items() if v is not None}
        # The admin key in this environment is for handlers to call a server with; the
        # stdio host itself never accepts it, so it is not validated as a server secret.
        values["server_admin_key"] = None
        settings = Settings.model_validate(values)
        project = load_project(workflow_dir.expanduser().resolve())
    except SteamharnessError as exc:
        fail(exc.message)
    except ValueError as exc:  # settings validation
        fail(first_error(exc))
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
