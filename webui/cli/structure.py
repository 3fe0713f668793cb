"""`steamharness structure`: a project's structure report as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from webui.cli.common import echo, json_text


def structure_command(
    workflow_dir: Annotated[Path, typer.Argument(help="The workflow project folder.")],
) -> None:
    """Print a project's structure report (entrypoints and static params) as JSON."""
    # The project loader imports jsonschema: paid by this command, not by `--help`.
    from webui.workflows.project import load_project, structure_report

    project = load_project(workflow_dir.expanduser().resolve())
    echo(json_text(structure_report(project)))
