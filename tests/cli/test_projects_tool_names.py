"""`steamharness projects add` and `projects publish` warn, on stderr, of each tool a known MCP
client cannot use even under the short server name the MCP page's set-ups give (issue 38,
item 3): the same line as the page, naming the client, the name it builds and its length;
stdout stays the id (add) and the version (publish); a project whose tools all fit gets no
warning. Everything said is terminal-safe, whatever the project's name holds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.cli.test_terminal_safe import HOSTILE, assert_terminal_safe
from tests.cli_runner import run_cli
from tests.knowledge.test_cli import clean_env, ok

PROJECT = "5e1f0c2a-7b3d-4c8e-9a6f-0d2b4e6a8c1f"
LONG_TOOL = "reconcile_every_open_invoice_against_the_statement"  # 50 characters
TOOLS = ["collect_document", "close_period", LONG_TOOL]
WARNING = "steamharness: warning: "


def write_project(folder: Path, name: str, tools: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text("def run(ctx):\n    return {}\n", encoding="utf-8")
    doc: dict[str, Any] = {
        "id": PROJECT,
        "name": name,
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"id": t, "title": t, "handler": "main.py:run"} for t in tools],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ok(run_cli([*args, "--data-dir", str(data)], env=clean_env()))


def warnings(stderr: str) -> list[str]:
    return [line.removeprefix(WARNING) for line in stderr.splitlines() if line.startswith(WARNING)]


def expected(short: str) -> list[str]:
    claude = f"mcp__{short}__{LONG_TOOL}"
    return [
        f"Claude Code: tool {LONG_TOOL} cannot be used: it becomes {claude}, {len(claude)} characters"
        " (Claude Code takes at most 64)",
        f"Cursor: tool {LONG_TOOL} cannot be used: it becomes {short} + {LONG_TOOL},"
        f" {len(short) + len(LONG_TOOL)} characters"
        " (Cursor takes fewer than 60 for the server and tool names together)",
    ]


def test_add_and_publish_warn_of_a_tool_that_cannot_fit_a_known_clients_limit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    folder = write_project(tmp_path / "p", "Month-end close", TOOLS)
    added = cli(data, "projects", "add", str(folder))
    assert added.stdout == f"{PROJECT}\n"
    assert warnings(added.stderr) == expected("month-end-close")
    published = cli(data, "projects", "publish", PROJECT)
    assert published.stdout == "1.0.0\n"
    assert warnings(published.stderr) == expected("month-end-close")


def test_publish_warns_of_the_version_it_published(tmp_path: Path) -> None:
    data = tmp_path / "data"
    folder = write_project(tmp_path / "p", "Month-end close", TOOLS[:2])
    assert warnings(cli(data, "projects", "add", str(folder)).stderr) == []
    write_project(folder, "Month-end close", TOOLS)  # the draft gains the long tool
    assert warnings(cli(data, "projects", "publish", PROJECT).stderr) == expected("month-end-close")


def test_a_project_whose_tools_all_fit_gets_no_warning(tmp_path: Path) -> None:
    data = tmp_path / "data"
    folder = write_project(tmp_path / "p", "Month-end close", TOOLS[:2])
    added = cli(data, "projects", "add", str(folder))
    assert WARNING not in added.stderr
    assert WARNING not in cli(data, "projects", "publish", PROJECT).stderr


def test_a_hostile_project_name_reaches_the_terminal_only_as_escapes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    folder = write_project(tmp_path / "p", f"Ledger {HOSTILE}" + "x" * 10_000, TOOLS)
    added = cli(data, "projects", "add", str(folder))
    assert_terminal_safe(added.stdout, added.stderr)
    found = warnings(added.stderr)
    assert found == expected("ledger-2j-h-0-owned")  # the short name: a-z 0-9 - only
