"""What the `steamharness` command imports before it knows which sub-command runs: help and
argument parsing pay for typer and the settings, not for the database layer, the migrations
or the schema validator (those are imported by the commands that use them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Imported only by what opens the database, checks its schema, validates a project or serves.
SERVER_ONLY = ("sqlalchemy", "sqlmodel", "alembic", "jsonschema", "argon2", "mcp", "fastapi", "uvicorn")

# `steamharness ARGS` through the real entry point, then which of SERVER_ONLY it imported.
_PROBE = """
import json, sys
args, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["steamharness", *args]
from webui.cli import main
try:
    main()
except SystemExit:
    pass
sys.stderr.write("IMPORTED " + json.dumps(sorted(m for m in heavy if m in sys.modules)) + "\\n")
"""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["mcp", "--help"], ["structure", "--help"], ["configs", "--help"], ["db", "--help"]],
    ids=" ".join,
)
def test_help_imports_no_server_only_package(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(SERVER_ONLY)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Usage:" in done.stdout, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("IMPORTED "))
    assert json.loads(line.removeprefix("IMPORTED ")) == []
