"""The project MCP page through TestClient: access, targets, the htmx fragment,
the copyable configurations, the tool catalog, Try it's form handling, and that no stored
key ever reaches the HTML. Try it against a live endpoint is in tests/e2e/test_try_it.py."""

from __future__ import annotations

import html
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.e2e.server import free_port
from tests.web.conftest import ADMIN, HELLO, LEDGER, USER, Web, prepare, rendered
from webui.admin import create_key, grant_projects
from webui.app import create_app
from webui.mcp.catalog import Catalog
from webui.projects.registry import ProjectRegistry
from webui.store import accounts as account_store
from webui.web import mcp_page
from webui.web.state import app_state
from webui.workflows.targets import parse_target

RICH = "c0ffee00-1111-4222-8333-444455556666"
TOOL_RE = re.compile(r'<article class="card tool" id="tool-([^"]+)"')
CALL_RE = re.compile(r'hx-get="/projects/[^/]+/mcp/try/([^"]+)"')


def pre(text: str, element_id: str) -> str:
    """The text a copy button copies: the <pre>'s content, unescaped."""
    m = re.search(rf'<pre id="{re.escape(element_id)}"[^>]*>(.*?)</pre>', text, re.S)
    assert m, f"no <pre id={element_id!r}>"
    return html.unescape(m.group(1))


def tools(text: str) -> list[str]:
    """The tool cards drawn in the HTML."""
    return TOOL_RE.findall(text)


def listed_tools(response: Any) -> list[str]:
    """The tools the page was given, in order."""
    return [t.name for t in rendered(response).context["tools"]]


def mcp(web: Web, project: str, target: str | None = "latest", **headers: str) -> Any:
    query = f"?target={target}" if target is not None else ""
    return web.client.get(f"/projects/{project}/mcp{query}", headers=headers, follow_redirects=False)


def registry(web: Web) -> ProjectRegistry:
    return app_state(web.client.app).registry


RICH_PARAMS = [
    {
        "name": "when",
        "type": "string",
        "format": "date",
        "required": True,
        "title": "Day",
        "description": "The day",
    },
    {
        "name": "size",
        "type": "string",
        "options": [{"value": "s", "label": "Small"}, {"value": "l", "label": "Large"}],
        "default": "s",
    },
    {"name": "tags", "type": "checkboxes", "options": ["a", "b"]},
    {"name": "count", "type": "number", "default": 2},
    {"name": "doc", "type": "file", "description": "A document"},
]


def write_rich(folder: Path, *, extra_tool: bool) -> None:
    entrypoints: list[dict[str, Any]] = [
        {
            "id": "plan",
            "title": "Plan",
            "description": "Plan a day.",
            "handler": "main.py:plan",
            "params": RICH_PARAMS,
        },
        {"id": "x.y", "title": "Dotted", "description": "A dotted name.", "handler": "main.py:plan"},
    ]
    if extra_tool:
        entrypoints.append(
            {"id": "extra", "title": "Extra", "description": "Draft only.", "handler": "main.py:plan"}
        )
    doc = {
        "id": RICH,
        "name": "rich",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "Every kind of param.",
        "entrypoints": entrypoints,
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")


@pytest.fixture
def rich(web: Web, tmp_path: Path) -> Path:
    """A project with every kind of param: 1.0.0 published, then a draft with one more tool;
    ann may use it."""
    folder = tmp_path / "rich"
    folder.mkdir()
    (folder / "main.py").write_text("def plan(ctx):\n    return {}\n", encoding="utf-8")
    write_rich(folder, extra_tool=False)
    reg = registry(web)
    reg.register(folder)
    reg.publish(RICH, "1.0.0")
    write_rich(folder, extra_tool=True)
    grant_projects(reg.engine, user=USER[0], projects=[RICH], registry=reg)
    return folder


@pytest.fixture
def dead_endpoint(tmp_path: Path) -> Iterator[Web]:
    """The app as seen at a loopback port nobody listens on: Try it's calls to its own
    endpoint fail at once, deterministically."""
    settings = prepare(tmp_path / "dead")
    with TestClient(create_app(settings), base_url=f"http://127.0.0.1:{free_port()}") as client:
        yield Web(client, settings)


# --------------------------------------------------------------------------- access


@pytest.mark.shares_app
def test_an_anonymous_visitor_is_sent_to_the_login_page(web: Web) -> None:
    r = mcp(web, HELLO)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/login?next=%2Fprojects%2F" + HELLO)


@pytest.mark.shares_app
def test_an_anonymous_htmx_request_gets_an_hx_redirect_to_login(web: Web) -> None:
    r = mcp(web, HELLO, **{"HX-Request": "true"})
    assert r.status_code == 401 and r.headers["hx-redirect"].startswith("/login?next=")


@pytest.mark.shares_app
def test_a_project_the_user_may_not_use_is_not_found(web: Web) -> None:
    web.login(*USER)
    assert mcp(web, LEDGER).status_code == 404
    assert web.client.get(f"/projects/{LEDGER}/mcp", follow_redirects=False).status_code == 404


@pytest.mark.shares_app
def test_an_unknown_project_is_not_found_even_for_an_admin(web: Web) -> None:
    web.login(*ADMIN)
    r = mcp(web, "11111111-1111-4111-8111-111111111111")
    assert r.status_code == 404 and "not registered" in r.text


@pytest.mark.shares_app
def test_a_malformed_target_is_a_bad_request(web: Web) -> None:
    web.login(*USER)
    r = mcp(web, HELLO, "v1")
    assert r.status_code == 400 and "target must be" in html.unescape(r.text)


def test_without_a_target_the_page_redirects_to_latest_or_to_the_draft_when_nothing_is_online(
    web: Web,
) -> None:
    web.login(*USER)
    assert mcp(web, HELLO, None).headers["location"] == f"/projects/{HELLO}/mcp?target=latest"
    registry(web).set_online(HELLO, "1.0.0", False)
    assert mcp(web, HELLO, None).headers["location"] == f"/projects/{HELLO}/mcp?target=draft"


@pytest.mark.shares_app
def test_a_target_that_resolves_to_nothing_keeps_the_picker_and_says_why(web: Web) -> None:
    web.login(*USER)
    r = mcp(web, HELLO, "9.9.9")
    assert r.status_code == 404
    template, _, context = rendered(r)
    assert template == "projects/mcp.html" and context["resolved"] is None
    assert "has no online version 9.9.9" in context["problem"] and "has no online version 9.9.9" in r.text
    assert [c.label for c in context["choices"]] == ["draft", "latest", "1.0.0"]  # the picker stays
    assert f'href="/projects/{HELLO}/mcp?target=latest"' in r.text
    assert context["tools"] == [] and tools(r.text) == []


# --------------------------------------------------------------------------- targets and fragment


def test_the_picker_offers_draft_latest_with_its_exact_version_and_every_online_version(
    web: Web, rich: Path
) -> None:
    registry(web).publish(RICH, "1.1.0")
    web.login(*USER)
    r = mcp(web, RICH, "1.0.0")
    text = r.text
    choices = rendered(r).context["choices"]
    assert [c.label for c in choices] == ["draft", "latest", "1.1.0", "1.0.0"]
    assert [c.href for c in choices] == [f"/projects/{RICH}/mcp?target={c.label}" for c in choices]
    assert choices[1].detail == "now 1.1.0"  # latest, with its exact version
    links = re.findall(rf'<a href="/projects/{RICH}/mcp\?target=([^"]+)" hx-get="[^"]+"[^>]*>([^<]+)', text)
    assert [label for label, _ in links] == [c.label for c in choices]  # each offered as a link
    assert "Latest <small>now 1.1.0</small>" in text
    assert re.search(
        r'target=1\.0\.0" hx-get="[^"]+" hx-target="#mcp-target" hx-swap="outerHTML" '
        r'hx-push-url="true" aria-current="page"',
        text,
    )


@pytest.mark.parametrize(
    ("target", "resolved", "expected_tools"),
    [
        ("draft", "revision <code>rev-", ["plan", "x.y", "extra"]),
        ("latest", "Latest resolves to version <strong>1.0.0</strong>", ["plan", "x.y"]),
        ("1.0.0", "Version <strong>1.0.0</strong>, pinned.", ["plan", "x.y"]),
    ],
    ids=["draft", "latest", "version"],
)
def test_each_target_shows_its_endpoint_resolution_and_catalog(
    web: Web, rich: Path, target: str, resolved: str, expected_tools: list[str]
) -> None:
    web.login(*USER)
    r = mcp(web, RICH, target)
    assert r.status_code == 200
    context = rendered(r).context
    endpoint = f"http://127.0.0.1/api/workflows/{RICH}/mcp?target={target}"
    assert context["endpoint"] == endpoint and pre(r.text, "endpoint") == endpoint  # copyable as is
    assert pre(r.text, "header-template") == "Authorization: Bearer <YOUR_API_KEY>"
    assert context["target"].label == target
    assert context["resolved"].version == (None if target == "draft" else "1.0.0")
    assert resolved in r.text
    assert listed_tools(r) == expected_tools and tools(r.text) == expected_tools


@pytest.mark.shares_app
def test_an_htmx_request_gets_only_the_target_fragment(web: Web) -> None:
    web.login(*USER)
    full = mcp(web, HELLO, "draft")
    fragment = mcp(web, HELLO, "draft", **{"HX-Request": "true"})
    assert full.status_code == fragment.status_code == 200
    assert rendered(full)[:2] == ("projects/mcp.html", None)
    assert rendered(fragment)[:2] == ("projects/mcp.html", "target")
    assert "<html" in full.text and "<html" not in fragment.text
    assert fragment.text.strip().startswith('<div id="mcp-target">')
    assert rendered(fragment).context["endpoint"] == rendered(full).context["endpoint"]
    assert pre(fragment.text, "endpoint") == pre(full.text, "endpoint")
    assert listed_tools(fragment) == listed_tools(full) == ["greet", "echo"]
    assert tools(fragment.text) == tools(full.text) == ["greet", "echo"]
    assert fragment.headers["vary"] == full.headers["vary"] == "HX-Request"


@pytest.mark.shares_app
def test_an_htmx_history_restore_gets_the_whole_page(web: Web) -> None:
    web.login(*USER)
    r = mcp(web, HELLO, "latest", **{"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert rendered(r)[:2] == ("projects/mcp.html", None)
    assert "<html" in r.text and 'id="mcp-target"' in r.text


# --------------------------------------------------------------------------- copyable configs


def expected_configs(url: str, folder: str) -> dict[str, Any]:
    """The generic and stdio set-ups name the server `workflow-<id>`; the set-ups of clients
    that put the server's name into each tool's name, its short name (the project's name)."""
    name, short = f"workflow-{HELLO}", "hello"
    return {
        "config-generic": {
            "mcpServers": {name: {"url": url, "headers": {"Authorization": "Bearer <YOUR_API_KEY>"}}}
        },
        "config-cursor": {
            "mcpServers": {short: {"url": url, "headers": {"Authorization": "Bearer <YOUR_API_KEY>"}}}
        },
        "config-vscode": {
            "inputs": [
                {
                    "type": "promptString",
                    "id": "workflow-api-key",
                    "description": "steamharness API key",
                    "password": True,
                }
            ],
            "servers": {
                short: {
                    "type": "http",
                    "url": url,
                    "headers": {"Authorization": "Bearer ${input:workflow-api-key}"},
                }
            },
        },
        "config-stdio": {"mcpServers": {name: {"command": "steamharness", "args": ["mcp", folder]}}},
    }


@pytest.mark.shares_app
def test_the_copied_configurations_parse_and_equal_the_expected_structures(web: Web) -> None:
    web.login(*USER)
    text = mcp(web, HELLO, "latest").text
    url = f"http://127.0.0.1/api/workflows/{HELLO}/mcp?target=latest"
    for element_id, expected in expected_configs(url, "/path/to/hello").items():
        assert json.loads(pre(text, element_id)) == expected, element_id
    assert shlex.split(pre(text, "config-claude-code")) == [
        "claude", "mcp", "add", "--transport", "http", "hello", url,
        "--header", "Authorization: Bearer <YOUR_API_KEY>",
    ]  # fmt: skip
    for element_id in (
        "endpoint",
        "header-template",
        *expected_configs(url, "").keys(),
        "config-claude-code",
    ):
        assert f'data-copy-target="{element_id}"' in text


@pytest.mark.shares_app
def test_the_generic_configuration_has_exactly_the_mcpservers_shape(web: Web) -> None:
    web.login(*USER)
    config = json.loads(pre(mcp(web, HELLO, "1.0.0").text, "config-generic"))
    ((name, server),) = config["mcpServers"].items()
    assert name == f"workflow-{HELLO}" and list(server) == ["url", "headers"]
    assert server["url"].endswith(f"/api/workflows/{HELLO}/mcp?target=1.0.0")
    assert server["headers"] == {"Authorization": "Bearer <YOUR_API_KEY>"}


@pytest.mark.shares_app
def test_an_admin_sees_the_registered_folder_in_the_stdio_variant(web: Web) -> None:
    web.login(*ADMIN)
    r = mcp(web, HELLO, "draft")
    config = json.loads(pre(r.text, "config-stdio"))
    folder = registry(web).record(HELLO).root
    [stdio] = [c for c in rendered(r).context["configs"] if c.id == "stdio"]
    assert json.loads(stdio.text) == config
    assert config["mcpServers"][f"workflow-{HELLO}"]["args"] == ["mcp", folder]
    assert Path(folder).is_absolute()


# --------------------------------------------------------------------------- catalog


def row(text: str, param: str) -> list[str]:
    m = re.search(rf"<tr>\s*<th scope=\"row\"><code>{param}</code>(.*?)</tr>", text, re.S)
    assert m, param
    cells = re.findall(r"<td>(.*?)</td>", m.group(1), re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells]


def test_the_parameter_table_shows_type_required_default_options_format_and_description(
    web: Web, rich: Path
) -> None:
    web.login(*USER)
    r = mcp(web, RICH, "1.0.0")
    text = r.text
    plan = rendered(r).context["tools"][0]
    assert (plan.name, plan.description) == ("plan", "Plan a day.")
    params = {p.name: p for p in plan.params}
    assert list(params) == ["when", "size", "tags", "count", "doc"]
    when, size, tags, count, doc = params.values()
    assert (when.type, when.required, when.default, when.options) == ("string", True, None, [])
    assert (when.format, when.title, when.description) == ("date", "Day", "The day")
    assert (size.type, size.required, size.default) == ("string", False, '"s"')
    assert size.options == [('"s"', "Small"), ('"l"', "Large")]
    assert (tags.type, tags.default, tags.options) == ("checkboxes", None, [('"a"', None), ('"b"', None)])
    assert (count.type, count.default, count.options, count.format) == ("number", "2", [], None)
    assert (doc.type, doc.required, doc.description) == ("file", False, "A document")
    # the table the person reads
    assert "Plan a day." in text and "<code>plan</code>" in text
    assert row(text, "when") == ["string", "yes", "—", "—", "date", "The day"]
    assert row(text, "size") == ["string", "no", '"s"', '"s" — Small"l" — Large', "—", ""]
    assert row(text, "tags") == ["checkboxes", "no", "—", '"a""b"', "—", ""]
    assert row(text, "count") == ["number", "no", "2", "—", "—", ""]
    assert row(text, "doc") == ["file", "no", "—", "—", "—", "A document"]
    assert '<th scope="row"><code>when</code><br><span class="muted">Day</span>' in text


def test_the_raw_input_schema_is_the_one_the_endpoint_lists(web: Web, rich: Path) -> None:
    web.login(*USER)
    r = mcp(web, RICH, "1.0.0")
    text = r.text
    catalog = Catalog.build(registry(web).resolve(RICH, parse_target("1.0.0")).project, file_mode="server")
    shown = rendered(r).context["tools"]
    assert [(t.name, t.schema) for t in shown] == [(t.name, t.input_schema) for t in catalog.tools]
    for index, tool in enumerate(catalog.tools, start=1):
        assert json.loads(pre(text, f"t{index}-schema")) == tool.input_schema  # copyable as is
    assert 'data-copy-target="t2-schema"' in text  # "x.y" gets a selector-safe id


OWN_SCHEMA = "5c4e3a20-2020-4d12-9a8b-3c0f2e1d7b66"
# The conformance fixture's tool with its own JSON Schema 2020-12 `inputSchema` ($schema,
# $defs with an $anchor, a $ref, allOf/anyOf, if/then/else), as that project declares it.
FIXTURE_PACKAGE = Path(__file__).resolve().parents[1] / "conformance" / "project" / "package.json"
SUITE_TOOL = next(
    e
    for e in json.loads(FIXTURE_PACKAGE.read_text(encoding="utf-8"))["entrypoints"]
    if e["id"] == "json_schema_2020_12_tool"
)


@pytest.fixture
def own_schema(web: Web, tmp_path: Path) -> dict[str, Any]:
    """A project whose one entrypoint gives its own inputSchema (instead of params),
    published as 1.0.0; ann may use it. Returns the schema as written."""
    folder = tmp_path / "own"
    folder.mkdir()
    (folder / "forms.py").write_text("def json_schema_2020_12_tool(ctx):\n    return {}\n", encoding="utf-8")
    doc = {
        "id": OWN_SCHEMA,
        "name": "own-schema",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "A tool with its own JSON Schema.",
        "entrypoints": [SUITE_TOOL],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    reg = registry(web)
    reg.register(folder)
    reg.publish(OWN_SCHEMA, "1.0.0")
    grant_projects(reg.engine, user=USER[0], projects=[OWN_SCHEMA], registry=reg)
    return SUITE_TOOL["inputSchema"]


@pytest.mark.parametrize("target", ["1.0.0", "draft"])
def test_an_entrypoints_own_json_schema_2020_12_is_shown_on_the_page_as_written(
    web: Web, own_schema: dict[str, Any], target: str
) -> None:
    assert {"$schema", "$defs", "allOf", "if", "then", "else"} <= set(own_schema)
    assert "$anchor" in own_schema["$defs"]["address"] and "anyOf" in own_schema["allOf"][0]
    web.login(*USER)
    r = mcp(web, OWN_SCHEMA, target)
    assert r.status_code == 200, r.text
    (tool,) = rendered(r).context["tools"]
    assert (tool.name, tool.own_schema, tool.params) == ("json_schema_2020_12_tool", True, [])
    assert tool.schema == own_schema
    shown = pre(r.text, "t1-schema")  # what the person reads and copies
    assert shown == json.dumps(own_schema, indent=2, ensure_ascii=False)  # as written, key order too
    assert json.loads(shown) == own_schema
    assert "this tool's own JSON Schema 2020-12, the input schema below (served as written" in r.text
    assert re.search(r"<details open>\s*<summary>Input schema</summary>", r.text)
    assert "Parameters of json_schema_2020_12_tool" not in r.text  # no params table stands for it


# --------------------------------------------------------------------------- Try it (form side)


def try_it(
    web: Web,
    project: str,
    tool: str,
    fields: dict[str, str],
    *,
    htmx: bool = True,
    csrf: str | None = None,
    target: str = "latest",
) -> Any:
    headers = {"HX-Request": "true"} if htmx else {}
    data = {"tool": tool, **fields}
    if csrf is not None:
        data["csrf_token"] = csrf
    return web.client.post(f"/projects/{project}/mcp/try?target={target}", data=data, headers=headers)


@pytest.mark.shares_app
def test_try_it_refuses_a_post_without_the_csrf_token(web: Web) -> None:
    web.login(*USER)
    r = try_it(web, HELLO, "greet", {"t1-name": "Ada"}, htmx=False)
    assert r.status_code == 403


@pytest.mark.shares_app
def test_try_it_answers_422_with_the_form_and_its_errors_and_starts_nothing(web: Web) -> None:
    csrf = web.login(*USER)
    r = try_it(web, HELLO, "greet", {"t1-times": "many"}, csrf=csrf)
    assert r.status_code == 422
    template, _, context = rendered(r)
    state = context["try_state"]
    assert template == "projects/_try_it.html" and context["t"].name == state.tool == "greet"
    assert set(state.errors) == {"name", "times"} and state.errors["name"] == "required"
    assert state.call is None  # nothing started
    assert "<html" not in r.text and r.text.strip().startswith('<div id="t1-try"')
    assert 'id="t1-name-error"' in r.text and "required" in r.text
    assert 'id="t1-times-error"' in r.text and 'value="many"' not in r.text
    account = account_store.get_account(registry(web).engine, name=USER[0])
    assert account is not None and account.id is not None
    assert account_store.list_keys(registry(web).engine, account_id=account.id) == []


@pytest.mark.shares_app
def test_try_it_without_htmx_renders_the_whole_page_with_the_errors_in_the_tools_card(web: Web) -> None:
    csrf = web.login(*USER)
    r = try_it(web, HELLO, "greet", {}, htmx=False, csrf=csrf)
    assert r.status_code == 422 and "<html" in r.text
    template, block, context = rendered(r)
    assert (template, block) == ("projects/mcp.html", None)
    assert context["try_state"].tool == "greet" and list(context["try_state"].errors) == ["name"]
    assert '<details class="try-it" open>' in r.text and 'id="t1-name-error"' in r.text


@pytest.mark.shares_app
def test_try_it_on_a_tool_the_target_does_not_have_is_not_found(web: Web) -> None:
    csrf = web.login(*USER)
    assert try_it(web, HELLO, "nope", {}, csrf=csrf).status_code == 404


@pytest.mark.shares_app
def test_try_it_on_a_project_the_user_may_not_use_is_not_found(web: Web) -> None:
    csrf = web.login(*USER)
    assert try_it(web, LEDGER, "post_entry", {}, csrf=csrf).status_code == 404


def test_try_it_reports_an_unreachable_endpoint_as_the_calls_outcome(dead_endpoint: Web) -> None:
    csrf = dead_endpoint.login(*USER)
    r = try_it(dead_endpoint, HELLO, "greet", {"t1-name": "Ada"}, csrf=csrf)
    assert r.status_code == 200
    call = rendered(r).context["try_state"].call
    assert (call.tool, call.arguments["name"], call.target) == ("greet", "Ada", "latest")
    assert call.outcome.kind == "failed" and call.outcome.message.startswith(
        "Could not reach the MCP endpoint"
    )
    assert (
        "Could not reach the MCP endpoint" in r.text and '<span class="badge failed">failed</span>' in r.text
    )


def test_a_slow_call_answers_running_then_the_follow_up_get_brings_the_outcome(
    dead_endpoint: Web, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_page, "FIRST_WAIT", 0)
    csrf = dead_endpoint.login(*USER)
    r = try_it(dead_endpoint, HELLO, "greet", {"t1-name": "Ada"}, csrf=csrf)
    started = rendered(r).context["try_state"].call
    assert "running…" in r.text  # (the call object lives on: its outcome may have arrived since)
    call_id = CALL_RE.search(r.text)  # the follow-up htmx asks for
    assert call_id and call_id.group(1) == started.id, r.text
    url = f"/projects/{HELLO}/mcp/try/{call_id.group(1)}"
    fragment = dead_endpoint.client.get(url, headers={"HX-Request": "true"})
    template, _, context = rendered(fragment)
    assert template == "projects/_try_outcome.html" and context["call"].id == started.id
    assert context["call"].outcome.kind == "failed"
    assert "<html" not in fragment.text and "Could not reach the MCP endpoint" in fragment.text
    full = dead_endpoint.client.get(url)
    state = rendered(full).context["try_state"]
    assert rendered(full).template == "projects/mcp.html" and state.values["name"] == "Ada"
    assert state.call.outcome.kind == "failed"
    assert "<html" in full.text and "Could not reach the MCP endpoint" in full.text
    assert '<details class="try-it" open>' in full.text and 'value="Ada"' in full.text
    dead_endpoint.logout()
    dead_endpoint.login(*ADMIN)
    assert dead_endpoint.client.get(url).status_code == 404  # another account's call


# --------------------------------------------------------------------------- secrecy


def test_the_page_never_contains_a_stored_key_or_key_hash(dead_endpoint: Web) -> None:
    web = dead_endpoint
    engine = app_state(web.client.app).services.engine
    raw_keys = [
        create_key(engine, user=USER[0], projects=None, scopes=None, name="laptop")[0],
        create_key(engine, user=USER[0], projects=[HELLO], scopes=["runs.read"], name="ro")[0],
        create_key(engine, user=ADMIN[0], projects=None, scopes=None, name="admin")[0],
    ]
    csrf = web.login(*USER)
    pages = [try_it(web, HELLO, "greet", {"t1-name": "Ada"}, csrf=csrf).text]  # creates the try-it key
    pages.append(try_it(web, HELLO, "greet", {"t1-name": "Ada"}, htmx=False, csrf=csrf).text)
    held = app_state(web.client.app).try_it._keys
    raw_keys += [raw for _, raw in held.values()]
    assert len(raw_keys) == 4
    for target in ("draft", "latest", "1.0.0"):
        pages.append(mcp(web, HELLO, target).text)
        pages.append(mcp(web, HELLO, target, **{"HX-Request": "true"}).text)
    secrets = [k.secret_hash for k, _ in account_store.list_keys(engine)] + raw_keys
    secrets += [raw.split("_", 2)[2] for raw in raw_keys]  # the secret part (it may itself hold "_")
    assert all(len(secret) >= 32 for secret in secrets)
    assert len(account_store.list_keys(engine)) == 4
    for text in pages:
        for secret in secrets:
            assert secret not in text
