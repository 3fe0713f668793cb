"""The MCP page says which of the viewer's configurations tool calls will use, and builds the
endpoint URL and client set-ups with `&config=NAME` when one is picked."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import HELLO, USER, Web, account_id, rendered, services
from tests.web.test_mcp_page import mcp, pre, registry
from webui.admin import grant_projects
from webui.configs.model import ConfigPlace, Who
from webui.configs.places import account_place
from webui.workflows.configuration import load_config_fields

PROJECT = "7d2f4e6a-1b3c-4d5e-8f70-a1b2c3d4e5f6"
FIELDS: list[dict[str, Any]] = [
    {"name": "endpoint", "type": "string", "required": True, "default": "https://a.example"},
    {"name": "token", "type": "secret"},
]
WHO = Who(actor="tester")
SECRET = "page-secret-9q"


def write(folder: Path, fields: list[dict[str, Any]]) -> None:
    doc = {
        "id": PROJECT,
        "name": "configured",
        "version": "1.0.0",
        "projectType": "workflow",
        "configuration": {"fields": fields},
        "entrypoints": [{"id": "show", "title": "Show", "description": "Show.", "handler": "h.py:show"}],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")


@pytest.fixture
def project(web: Web, tmp_path: Path) -> Path:
    folder = tmp_path / "configured"
    folder.mkdir()
    (folder / "h.py").write_text("def show(ctx):\n    return dict(ctx.config)\n", encoding="utf-8")
    write(folder, FIELDS)
    reg = registry(web)
    reg.register(folder)
    reg.publish(PROJECT, "1.0.0")
    grant_projects(reg.engine, user=USER[0], projects=[PROJECT], registry=reg)
    web.login(*USER)
    return folder


def ann_place(web: Web, folder: Path) -> ConfigPlace:
    _, fields = load_config_fields(folder)
    return account_place(PROJECT, fields, account_id=account_id(web, USER[0]), account_name=USER[0])


def used(response: Any) -> str:
    """What the page says calls will use, as text."""
    assert response.status_code == 200, response.text
    m = re.search(r'id="config-used">(.*?)</p>', response.text, re.S)
    assert m, "no configuration statement"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).split())


def test_without_a_pick_the_page_names_the_active_configuration_and_its_revision(
    web: Web, project: Path
) -> None:
    r = mcp(web, PROJECT)
    assert "active configuration at each call: now default (revision 1)" in used(r)
    assert rendered(r).context["config_use"].picked is None
    assert "&config=" not in pre(r.text, "endpoint")
    configs = services(web).configs
    configs.create(ann_place(web, project), "prod", {"token": SECRET}, WHO)
    configs.activate(ann_place(web, project), "prod", WHO)
    r = mcp(web, PROJECT)
    assert "now prod (revision 1)" in used(r)
    assert SECRET not in r.text


def test_a_picked_configuration_goes_into_the_url_the_client_setups_and_the_pickers(
    web: Web, project: Path
) -> None:
    services(web).configs.create(ann_place(web, project), "prod", {}, WHO)
    r = web.client.get(f"/projects/{PROJECT}/mcp?target=latest&config=prod")
    assert "through this URL run with your configuration prod (revision 1 now)" in used(r)
    endpoint = pre(r.text, "endpoint")
    assert endpoint.endswith(f"/api/workflows/{PROJECT}/mcp?target=latest&config=prod")
    generic = json.loads(pre(r.text, "config-generic"))
    assert generic["mcpServers"][f"workflow-{PROJECT}"]["url"] == endpoint
    context = rendered(r).context
    assert {c.href for c in context["choices"]} >= {
        f"/projects/{PROJECT}/mcp?target=draft&config=prod",
        f"/projects/{PROJECT}/mcp?target=latest&config=prod",
    }
    assert [(c.name, c.href) for c in context["config_use"].choices] == [
        (None, f"/projects/{PROJECT}/mcp?target=latest"),
        ("default", f"/projects/{PROJECT}/mcp?target=latest&config=default"),
        ("prod", f"/projects/{PROJECT}/mcp?target=latest&config=prod"),
    ]
    assert context["try_action"] == f"/projects/{PROJECT}/mcp/try?target=latest&config=prod"
    assert 'aria-current="page">prod</a>' in r.text


def test_an_unknown_pick_says_calls_will_fail_and_a_malformed_one_is_a_bad_request(
    web: Web, project: Path
) -> None:
    r = web.client.get(f"/projects/{PROJECT}/mcp?target=latest&config=nosuch")
    assert "no configuration 'nosuch'" in used(r) and "config_not_found" in used(r)
    bad = web.client.get(f"/projects/{PROJECT}/mcp?target=latest&config=bad%20name")
    assert bad.status_code == 400


def test_a_configuration_the_fields_outgrew_shows_needs_update_naming_the_field(
    web: Web, project: Path
) -> None:
    write(project, [*FIELDS, {"name": "region", "type": "string", "required": True}])
    r = mcp(web, PROJECT, "draft")
    assert r.status_code == 200
    warning = rendered(r).context["config_use"].problems
    assert warning == {"region": "is required"}
    assert 'id="config-needs-update"' in r.text and "<code>region</code> is required" in r.text
    assert 'id="config-needs-update"' not in mcp(web, PROJECT, "latest").text  # 1.0.0's fields


@pytest.mark.shares_app
def test_a_project_without_configuration_fields_shows_no_configuration_section(web: Web) -> None:
    web.login(*USER)
    r = mcp(web, HELLO)
    assert r.status_code == 200 and rendered(r).context["config_use"] is None
    assert 'id="mcp-config"' not in r.text
