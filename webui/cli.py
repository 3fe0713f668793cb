"""The `steamharness` command. Errors are one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import anyio
import typer

from webui.errors import ConfigError, SteamharnessError
from webui.settings import Settings
from webui.workflows.project import load_project, structure_report

app = typer.Typer(
    name="steamharness",
    help="Serve workflow projects as MCP servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"steamharness: error: {message}", err=True)
    raise typer.Exit(code)


def _absolute(option: str, value: Path | None) -> Path | None:
    if value is not None and not value.is_absolute():
        raise ConfigError(f"{option} must be an absolute path, got {str(value)!r}")
    return value


def _related(values: list[str]) -> dict[str, str]:
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


DirOpt = Annotated[Path | None, typer.Option(help="Absolute directory.", show_default=False)]


@app.command("mcp")
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

    try:
        options = {
            "data_dir": _absolute("--data-dir", data_dir),
            "file_store_dir": _absolute("--file-store-dir", file_store_dir),
            "kv_store_dir": _absolute("--kv-store-dir", kv_store_dir),
            "persistent_value_store_dir": _absolute(
                "--persistent-value-store-dir", persistent_value_store_dir
            ),
            "file_create_store_dir": _absolute("--file-create-store-dir", file_create_store_dir),
            "auth_dir": _absolute("--auth-dir", auth_dir),
        }
        related = _related(related_project or [])
        settings = Settings.model_validate({k: v for k, v in options.items() if v is not None})
        project = load_project(workflow_dir.expanduser().resolve())
    except SteamharnessError as exc:
        fail(exc.message)
    except ValueError as exc:  # settings validation
        fail(str(exc).splitlines()[0])
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="steamharness: %(levelname)s %(message)s"
    )
    try:
        anyio.run(serve_stdio, settings, project, related)
    except SteamharnessError as exc:
        fail(exc.message)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command("structure")
def structure_command(
    workflow_dir: Annotated[Path, typer.Argument(help="The workflow project folder.")],
) -> None:
    """Print a project's structure report (entrypoints and static params) as JSON."""
    try:
        project = load_project(workflow_dir.expanduser().resolve())
    except SteamharnessError as exc:
        fail(exc.message)
    typer.echo(json.dumps(structure_report(project), indent=2, ensure_ascii=False))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
