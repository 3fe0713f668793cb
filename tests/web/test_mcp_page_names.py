"""The MCP page's client set-ups give tool names each client takes (issue 38, item 3): Claude
Code, VS Code and Cursor put the server's name before each tool's name and limit the result,
so their set-ups name the server with its short name (the project's name); the generic and
stdio set-ups keep `workflow-<id>`. A tool that cannot fit a known client's limit even so is
named on the page, with the client, the name the client builds and its length."""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path
from typing import Any

from tests.web.conftest import USER, Web, rendered
from tests.web.test_mcp_page import mcp, pre, registry
from webui.admin import grant_projects

PROJECT = "5e1f0c2a-7b3d-4c8e-9a6f-0d2b4e6a8c1f"
LONG_TOOL = "reconcile_every_open_invoice_against_the_statement"  # 50 characters
TOOLS = ["collect_document", "close_period", LONG_TOOL]


def write_project(folder: Path, name: str, tools: list[str], project_id: str = PROJECT) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text("def run(ctx):\n    return {}\n", encoding="utf-8")
    doc: dict[str, Any] = {
        "id": project_id,
        "name": name,
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"id": t, "title": t, "handler": "main.py:run"} for t in tools],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def add(web: Web, folder: Path, project_id: str = PROJECT) -> None:
    reg = registry(web)
    reg.register(folder)
    grant_projects(reg.engine, user=USER[0], projects=[project_id], registry=reg)


def server_names(text: str) -> dict[str, str]:
    """The server name each copyable set-up gives (the Claude Code one from its argv)."""
    argv = shlex.split(pre(text, "config-claude-code"))
    assert argv[:5] == ["claude", "mcp", "add", "--transport", "http"], argv
    (generic,) = json.loads(pre(text, "config-generic"))["mcpServers"]
    (cursor,) = json.loads(pre(text, "config-cursor"))["mcpServers"]
    (vscode,) = json.loads(pre(text, "config-vscode"))["servers"]
    (stdio,) = json.loads(pre(text, "config-stdio"))["mcpServers"]
    return {"generic": generic, "claude-code": argv[5], "cursor": cursor, "vscode": vscode, "stdio": stdio}


def test_each_clients_set_up_names_the_server_so_that_the_example_tool_fits(web: Web, tmp_path: Path) -> None:
    add(web, write_project(tmp_path / "p", "Month-end close", TOOLS))
    web.login(*USER)
    r = mcp(web, PROJECT, "draft")
    assert r.status_code == 200
    names = server_names(r.text)
    assert names["generic"] == names["stdio"] == f"workflow-{PROJECT}"  # as documented
    for client in ("claude-code", "cursor", "vscode"):
        short = names[client]
        assert short == "month-end-close", client
        assert len("mcp__" + short + "__" + "collect_document") <= 64, client
        assert len(short) + len("collect_document") < 60, client
    # the old name makes 68 in Claude Code (the issue)
    assert len(f"mcp__workflow-{PROJECT}__collect_document") == 68
    assert rendered(r).context["short_name"] == "month-end-close"
    said = html.unescape(re.sub(r"<[^>]+>", "", r.text))
    assert "name this server month-end-close" in said


def test_a_tool_that_cannot_fit_even_so_is_named_with_the_client_its_name_and_length(
    web: Web, tmp_path: Path
) -> None:
    add(web, write_project(tmp_path / "p", "Month-end close", TOOLS))
    web.login(*USER)
    r = mcp(web, PROJECT, "draft")
    m = re.search(r'<div class="error" role="alert" id="name-problems">(.*?)</div>', r.text, re.S)
    assert m, r.text
    items = [
        html.unescape(re.sub(r"<[^>]+>", "", li)).strip()
        for li in re.findall(r"<li>(.*?)</li>", m.group(1), re.S)
    ]
    claude = f"mcp__month-end-close__{LONG_TOOL}"
    assert items == [
        f"Claude Code: tool {LONG_TOOL} cannot be used: it becomes {claude}, {len(claude)} characters"
        " (Claude Code takes at most 64)",
        f"Cursor: tool {LONG_TOOL} cannot be used: it becomes month-end-close + {LONG_TOOL},"
        f" {15 + len(LONG_TOOL)} characters"
        " (Cursor takes fewer than 60 for the server and tool names together)",
    ]
    assert len(claude) == 72
    assert "collect_document cannot" not in r.text and "close_period cannot" not in r.text


def test_a_project_whose_tools_all_fit_has_no_warning(web: Web, tmp_path: Path) -> None:
    add(web, write_project(tmp_path / "p", "Month-end close", TOOLS[:2]))
    web.login(*USER)
    r = mcp(web, PROJECT, "draft")
    assert r.status_code == 200
    assert 'id="name-problems"' not in r.text
    assert rendered(r).context["name_problems"] == []
