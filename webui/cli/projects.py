"""`steamharness projects …`: register, publish, take offline, gate and limit projects."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    cli_audit,
    echo,
    fail,
    fail_all,
    json_text,
    open_store,
    server_settings,
)

app = typer.Typer(help="Register, publish and take offline workflow projects.", no_args_is_help=True)


@app.command("list")
def projects_list(data_dir: DataDirOpt = None, database_url: DatabaseOpt = None) -> None:
    """List registered projects with their versions."""
    from webui.store import projects as project_store

    engine, registry = open_store(server_settings(data_dir, database_url))
    rows = []
    for record in project_store.list_projects(engine):
        versions = project_store.list_versions(engine, project_id=record.id)
        latest = registry.online_versions(record.id)
        rows.append(
            {
                "id": record.id,
                "name": record.name,
                "root": record.root,
                "latest": latest[0].version if latest else None,
                "versions": {v.version: v.status for v in versions},
                "runGateOpen": record.run_gate_open,
            }
        )
    echo(json_text(rows))


@app.command("add")
def projects_add(
    directory: Annotated[Path, typer.Argument(help="The project folder.")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Register a project folder (its working tree is the draft). Harmless if already registered.
    The project is checked first (package.json and every entrypoint's handler, imported in a
    bounded child process): every problem is printed at once and nothing is registered."""
    from webui.errors import ProjectProblems

    _, registry = open_store(server_settings(data_dir, database_url))
    try:
        project, created = registry.register_checked(directory)
    except ProjectProblems as exc:
        fail_all(exc.problems)
    echo(f"{'registered' if created else 'already registered'}: {project.name} {project.id}", err=True)
    _warn_tool_names(registry.record(project.id).name, project.id, [ep.id for ep in project.entrypoints])
    echo(project.id)


@app.command("publish")
def projects_publish(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    version: Annotated[str | None, typer.Option(help="X.Y.Z (default: package.json version).")] = None,
    revision: Annotated[
        str | None,
        typer.Option(
            help="Publish only the draft revision you reviewed (as `projects diff` prints it): if the"
            " copied draft is another revision, nothing is published."
        ),
    ] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Snapshot the draft as an immutable, online version."""
    from webui.workflows.targets import parse_target

    _, registry = open_store(server_settings(data_dir, database_url))
    row = registry.publish(project_id, version, reviewed=revision, actor="cli", audit=cli_audit())
    echo(f"published {project_id} {row.version} ({row.revision})", err=True)
    published = registry.resolve(project_id, parse_target(row.version)).project
    _warn_tool_names(registry.record(project_id).name, project_id, [ep.id for ep in published.entrypoints])
    echo(row.version)


def _warn_tool_names(name: str, project_id: str, tools: list[str]) -> None:
    """A warning on stderr for each tool a known MCP client cannot use even under the short
    server name the MCP page's client set-ups give (`webui.workflows.client_limits`)."""
    from webui.workflows.client_limits import name_problems, short_server_name

    for problem in name_problems(short_server_name(name, project_id), tools):
        echo(f"steamharness: warning: {problem.text()}", err=True)


def _set_online(
    project_id: str, version: str, online: bool, data_dir: Path | None, database_url: str | None
) -> None:
    _, registry = open_store(server_settings(data_dir, database_url))
    registry.set_online(project_id, version, online, actor="cli", audit=cli_audit())
    echo(f"{project_id} {version} is {'online' if online else 'offline'}", err=True)


@app.command("offline")
def projects_offline(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    version: Annotated[str, typer.Argument(metavar="VERSION")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Take a version offline (latest moves to the newest online one)."""
    _set_online(project_id, version, False, data_dir, database_url)


@app.command("online")
def projects_online(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    version: Annotated[str, typer.Argument(metavar="VERSION")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Bring an offline version back online."""
    _set_online(project_id, version, True, data_dir, database_url)


@app.command("gate")
def projects_gate(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    state: Annotated[str, typer.Argument(metavar="open|close", help="Accept new runs, or refuse them.")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Open or close a project's run gate (a closed gate refuses new runs, creates none)."""
    if state not in ("open", "close"):
        fail(f"expected 'open' or 'close', not {state!r}")
    _, registry = open_store(server_settings(data_dir, database_url))
    registry.set_limits(project_id, run_gate_open=state == "open")
    echo(f"{project_id}: run gate {'open' if state == 'open' else 'closed'}", err=True)


@app.command("limits")
def projects_limits(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    max_running: Annotated[int | None, typer.Option(min=1, help="Runs holding a worker at once.")] = None,
    max_queued: Annotated[int | None, typer.Option(min=0, help="Runs waiting for a slot.")] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Set a project's queue limits (checked before every tool call)."""
    _, registry = open_store(server_settings(data_dir, database_url))
    changes = {
        k: v for k, v in {"max_running": max_running, "max_queued": max_queued}.items() if v is not None
    }
    if not changes:
        fail("give --max-running and/or --max-queued")
    registry.set_limits(project_id, **changes)
    echo(f"{project_id}: {', '.join(f'{k}={v}' for k, v in changes.items())}", err=True)


@app.command("diff")
def projects_diff(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    against: Annotated[
        str, typer.Option(help="The version to compare the draft with (default: latest).")
    ] = "latest",
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Show how the draft's tools differ from a published version's: what publishing the
    draft changes for clients (breaking changes start with BREAKING)."""
    from webui.mcp.catalog import contract_changes
    from webui.workflows.targets import parse_target

    _, registry = open_store(server_settings(data_dir, database_url))
    review = registry.review_draft(project_id)
    draft = review.project
    old = None
    if against != "latest" or registry.online_versions(project_id):
        old = registry.resolve(project_id, parse_target(against)).project
    changes = contract_changes(old, draft)
    for change in changes:
        echo(change.line())
    label = against if old is not None else "no online version"
    breaking = sum(c.breaking for c in changes)
    echo(f"{len(changes)} change(s), {breaking} breaking, against {label}", err=True)
    echo(f"draft revision {review.revision} (to publish just it: --revision {review.revision})", err=True)
