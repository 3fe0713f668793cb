"""`steamharness host …`: check the host's MCP server configuration (the external MCP
servers this host connects to as a client, its defaults and agents).

`steamharness config …`, the group's first name, still works as a hidden alias that says
its new name on stderr before it runs (`alias`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from webui.cli.common import echo, load_settings, setting_help

MOVED = "`steamharness config` is now `steamharness host`"

app = typer.Typer(
    help="The host's MCP server configuration: the external MCP servers it connects to.",
    no_args_is_help=True,
)


def _say_moved() -> None:
    echo(f"steamharness: warning: {MOVED}", err=True)


# `steamharness config`: the same commands under the old name, hidden from --help.
alias = typer.Typer(help=f"{MOVED}.", no_args_is_help=True, callback=_say_moved)


@app.command("validate")
@alias.command("validate")
def host_validate(
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
    check_env: Annotated[
        bool,
        typer.Option(
            "--check-env",
            help="Fail when a ${NAME} is unset or empty in this environment (default: a warning, "
            "since the server reads the variables from its own environment when it connects).",
        ),
    ] = False,
) -> None:
    """Check config.yaml, mcp/ server files and agents/ files without connecting: one line per problem.

    Credentials are never checked. A `${NAME}` that is unset or empty here is a warning
    (exit 0 if nothing else is wrong); with --check-env it is an error."""
    from webui.host.config import HostConfigError, load_host_config
    from webui.host.config.loader import environment_problems

    # The server admin key plays no part in the configuration: it is not checked here.
    folder = load_settings({"root_dir": root}, admin_key=False).resolved_root_dir.expanduser().resolve()
    try:
        config = load_host_config(folder, os.environ if check_env else None)
    except HostConfigError as exc:
        for problem in exc.problems:
            echo(f"steamharness: error: {problem}", err=True)
        raise typer.Exit(1) from None
    warnings = environment_problems(config, os.environ)
    for warning in warnings:
        echo(f"steamharness: warning: {warning}", err=True)
    defaults = ", ".join(config.default_servers) or "none"
    tail = f" ({len(warnings)} warning(s); --check-env makes them errors)" if warnings else ""
    count = len(config.servers)
    agents = f"; {len(config.agents)} agent(s)" if config.agents else ""
    echo(
        f"steamharness: config ok: {count} MCP server(s) in {folder}; defaults: {defaults}{agents}{tail}",
        err=True,
    )
