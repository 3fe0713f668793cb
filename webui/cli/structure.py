"""`steamharness structure`: a project's structure report as JSON, once the project passes
the check that `projects add`, `publish` and `mcp` make too (package.json and every
entrypoint's handler: its file, its function, its signature)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from webui.cli.common import echo, fail_all, json_text, load_settings


def structure_command(
    workflow_dir: Annotated[Path, typer.Argument(help="The workflow project folder.")],
) -> None:
    """Check a project (package.json and every handler) and print its structure report as JSON;
    every problem found is printed instead, one line each, and the exit status is 2."""
    # The project loader imports jsonschema: paid by this command, not by `--help`.
    from webui.projects.handler_check import check_bounds
    from webui.workflows.project import check_project, structure_report

    bounds = check_bounds(load_settings({}, admin_key=False))
    reading = check_project(workflow_dir.expanduser().resolve(), bounds)
    if reading.project is None:
        fail_all(reading.problems)
    echo(json_text(structure_report(reading.project)))
