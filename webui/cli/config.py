"""`steamharness config …`: check the host's MCP server configuration."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from webui.cli.common import load_settings, setting_help

app = typer.Typer(help="The host's MCP server configuration.", no_args_is_help=True)


@app.command("validate")
def config_validate(
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help=setting_help(
                "Root config folder (config.yaml, mcp/); default the data dir, ~/.steamharness.",
                "root_dir",
                "data_dir",
            ),
            show_default=False,
        ),
    ] = None,
) -> None:
    """Check config.yaml and mcp/ server files without connecting: one line per problem."""
    from webui.host.config import HostConfigError, load_host_config

    # The server admin key plays no part in the configuration: it is not checked here.
    folder = load_settings({"root_dir": root}, admin_key=False).resolved_root_dir.expanduser().resolve()
    try:
        config = load_host_config(folder, os.environ)
    except HostConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"steamharness: error: {problem}", err=True)
        raise typer.Exit(1) from None
    defaults = ", ".join(config.default_servers) or "none"
    typer.echo(
        f"steamharness: config ok: {len(config.servers)} MCP server(s) in {folder}; defaults: {defaults}",
        err=True,
    )
