"""A project's name is the project author's text: on the MCP page it makes the short server
name of the Claude Code, VS Code and Cursor set-ups, and (for a non-administrator) the folder
placeholder of the stdio one. Quotes, markup, line breaks, bidirectional controls, shell
syntax and 10,000 characters never break a set-up: each JSON set-up parses, the shell one
splits into the same argv, the short name is `a-z 0-9 -` of at most 20 characters whose names
fit, and the page holds the name only escaped. Someone the project is not shared with gets
404 and no short name."""

from __future__ import annotations

import html
import json
import re
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ADMIN, USER, Web, prepare, running
from webui.admin import grant_projects
from webui.projects.registry import ProjectRegistry
from webui.web.state import app_state

TOOL = "collect_document"
HOSTILE = [
    "Quote \" and ' and \\ backslash",
    "<script>alert(1)</script><img src=x onerror=alert(1)>",
    "Line\nbreak\r\nand\ttab\u2028sep",
    "\u202eRTL override\u2066isolate\u2069 \u061c",
    "$(touch /tmp/owned); `id` && rm -rf ~ | cat > x",
    "{{7*7}} {% raw %}",
    "N" * 10_000,
    "日本語のプロジェクト",
]
SHORT_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,18}[a-z0-9])?")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    with running(prepare(tmp_path_factory.mktemp("names") / "data")) as own:
        yield own


def registry(web: Web) -> ProjectRegistry:
    return app_state(web.client.app).registry


def add(web: Web, folder: Path, name: str, *, grant: bool = True) -> str:
    project_id = str(uuid.uuid4())
    folder.mkdir(parents=True)
    (folder / "main.py").write_text("def run(ctx):\n    return {}\n", encoding="utf-8")
    doc: dict[str, Any] = {
        "id": project_id,
        "name": name,
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"id": TOOL, "title": "Collect", "handler": "main.py:run"}],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    reg = registry(web)
    reg.register(folder)
    if grant:
        grant_projects(reg.engine, user=USER[0], projects=[project_id], registry=reg)
    return project_id


def pre(text: str, element_id: str) -> str:
    m = re.search(rf'<pre id="{re.escape(element_id)}"[^>]*>(.*?)</pre>', text, re.S)
    assert m, element_id
    return html.unescape(m.group(1))


@pytest.mark.parametrize("who", [USER, ADMIN], ids=["user", "admin"])
@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_project_name_never_breaks_a_set_up(
    app: Web, tmp_path: Path, name: str, who: tuple[str, str]
) -> None:
    web = app
    project_id = add(web, tmp_path / "p", name)
    web.logout()
    web.login(*who)
    r = web.client.get(f"/projects/{project_id}/mcp?target=draft")
    assert r.status_code == 200
    generic = json.loads(pre(r.text, "config-generic"))["mcpServers"]
    assert list(generic) == [f"workflow-{project_id}"]
    (cursor,) = json.loads(pre(r.text, "config-cursor"))["mcpServers"]
    vscode = json.loads(pre(r.text, "config-vscode"))
    (vs_name,) = vscode["servers"]
    assert vscode["servers"][vs_name]["headers"] == {"Authorization": "Bearer ${input:workflow-api-key}"}
    stdio = json.loads(pre(r.text, "config-stdio"))["mcpServers"][f"workflow-{project_id}"]
    if who == USER:
        assert stdio["args"] == ["mcp", f"/path/to/{name}"]  # the name, whole, as a JSON string
    argv = shlex.split(pre(r.text, "config-claude-code"))
    assert len(argv) == 9 and argv[:5] == ["claude", "mcp", "add", "--transport", "http"]
    assert argv[6].endswith(f"/api/workflows/{project_id}/mcp?target=draft")
    assert argv[7:] == ["--header", "Authorization: Bearer <YOUR_API_KEY>"]
    short = argv[5]
    assert cursor == vs_name == short
    assert SHORT_RE.fullmatch(short), short
    assert len("mcp__" + short + "__" + TOOL) <= 64
    assert 'id="name-problems"' not in r.text
    # the name reaches the HTML only escaped
    assert "<script>alert" not in r.text and "<img src=x" not in r.text
    assert "49" not in re.findall(r"<h1>(.*?)</h1>", r.text, re.S)[0]


def test_someone_the_project_is_not_shared_with_gets_404_and_no_short_name(app: Web, tmp_path: Path) -> None:
    web = app
    project_id = add(web, tmp_path / "p", "Secret Ledger Zq", grant=False)
    web.logout()
    web.login(*USER)
    r = web.client.get(f"/projects/{project_id}/mcp?target=draft")
    assert r.status_code == 404
    assert "secret-ledger-zq" not in r.text and "Secret Ledger" not in r.text
