"""Hostile JSON on every route that reads it: deep nesting (`"[" * 100000`), duplicate keys,
NaN and bytes that are not UTF-8 are refused with a clear 400 (the configuration page: its
error panel), never a 500 or a RecursionError, against a real `steamharness serve`. And a
static check that every route under `webui/web` reads JSON through the one strict reader
(`webui.web.json_body` / `webui.strict_json`). The MCP endpoint: `test_jsonrpc_strict.py`."""

from __future__ import annotations

import ast
import contextlib
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.params import File, Form
from fastapi.routing import APIRoute, iter_route_contexts

from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import LiveServer, make_server
from webui import strict_json
from webui.app import create_app
from webui.settings import Settings

WEB = Path(__file__).resolve().parents[2] / "webui" / "web"
BASE = f"/api/workflows/{SETTINGS_PROJECT}/configs"
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
WAIT = 30.0
DEEP = ("[" * 10_000 + "]" * 10_000).encode()  # far past the recursion limit, under 20,000 arrays
JUST_TOO_DEEP = ('{"name": "deep", "values": {"tags": ' + "[" * 70 + "]" * 70 + "}}").encode()
HOSTILE = {
    "deep": (DEEP, "nested deeper than 64 levels"),
    "just too deep": (JUST_TOO_DEEP, "nested deeper than 64 levels"),
    "duplicate key": (b'{"name": "a", "name": "b", "values": {}}', "duplicate key 'name'"),
    "NaN": (b'{"name": "n", "values": {"threshold": NaN}}', "NaN is not valid JSON"),
    "not UTF-8": (b'{"name": "\xff"}', "not UTF-8"),
    "not JSON": (b"{oops", "not valid JSON"),
}


# --------------------------------------------------------------------------- the one reader


def test_the_strict_reader_refuses_depth_past_its_limit_and_length_past_its_cap() -> None:
    assert strict_json.loads("[" * 64 + "]" * 64) is not None
    for text in ("[" * 65 + "]" * 65, '{"a":' * 65 + "1" + "}" * 65, "[" * 10_000 + "]" * 10_000):
        with pytest.raises(strict_json.StrictJSONError, match="nested deeper than 64 levels"):
            strict_json.loads(text)
    with pytest.raises(strict_json.StrictJSONError, match="nested deeper than 3 levels"):
        strict_json.loads(b'{"a": [[{}]]}', max_depth=3)
    with pytest.raises(strict_json.StrictJSONError, match="longer than 10 characters"):
        strict_json.loads('["0123456789"]', max_chars=10)
    assert strict_json.depth({"a": [1, {"b": []}], "c": 2}) == 4 and strict_json.depth(7) == 0


def _json_reads(tree: ast.AST) -> list[str]:
    """Calls that parse JSON without the strict reader: `json.load(s)`, `request.json()`,
    pydantic's JSON parsers."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, owner = node.func.attr, node.func.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if (name == "json" and attr in ("loads", "load")) or attr in (
            "json",
            "from_json",
            "model_validate_json",
            "validate_json",
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_under_webui_web_parses_json_but_through_the_strict_reader() -> None:
    offenders = {}
    for path in sorted(WEB.glob("*.py")):
        found = _json_reads(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[path.name] = found
    assert offenders == {}


def test_the_static_check_finds_each_other_way_of_reading_json() -> None:
    code = """
async def route(request):
    a = await request.json()
    b = json.loads(await request.body())
    c = json.load(stream)
    d = Model.model_validate_json(raw)
    e = pydantic_core.from_json(raw)
    ok = strict_json.loads(raw)
"""
    assert len(_json_reads(ast.parse(code))) == 5


def test_no_route_has_a_body_parameter_fastapi_parses_as_json(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    # Every route, those of included routers too (app.routes holds only the top level's).
    routes = [ctx for ctx in iter_route_contexts(app.routes) if isinstance(ctx.original_route, APIRoute)]
    assert len(routes) > 50, "the walk found the app's routes"
    parsed_by_fastapi = [
        f"{sorted(ctx.methods or ())} {ctx.path}: {param.name}"
        for ctx in routes
        for param in ctx.dependant.body_params
        if not isinstance(param.field_info, (Form, File))
    ]
    assert parsed_by_fastapi == []


# --------------------------------------------------------------------------- routes, live


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = make_server(tmp_path_factory.mktemp("json-depth"))
    live.add_project(write_settings_project(live.projects / "settings"), SETTINGS_PROJECT)
    live.add_user("alice", password="alice-password-1")
    live.grant("alice", [SETTINGS_PROJECT])
    with live.running():
        yield live
    log = live.log()
    assert "Traceback" not in log and "RecursionError" not in log


@pytest.fixture(scope="module")
def api(server: LiveServer) -> Iterator[httpx2.Client]:
    key = server.create_key("alice", scopes=["configs", "runs.create", "runs.read"])
    with httpx2.Client(
        base_url=server.base_url,
        timeout=WAIT,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    ) as client:
        assert client.post(BASE, json={"name": "target", "values": {}}).status_code == 201
        yield client


def refused(r: httpx2.Response, word: str, code: str) -> None:
    assert r.status_code == 400, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == code and word in error["message"], error
    assert "Traceback" not in r.text and "Recursion" not in r.text


@pytest.mark.parametrize("label", list(HOSTILE))
def test_the_configurations_api_refuses_hostile_json_on_every_write(api: httpx2.Client, label: str) -> None:
    body, word = HOSTILE[label]
    writes = [
        ("POST", BASE, {}),
        ("PATCH", f"{BASE}/target", {"If-Match": '"1"'}),
        ("POST", f"{BASE}/import", {}),
        ("POST", f"{BASE}/target/rename", {"If-Match": '"1"'}),
    ]
    for method, path, headers in writes:
        refused(api.request(method, path, content=body, headers=headers), word, "config_refused")
    names = {c["name"] for c in api.get(BASE).json()["data"]["configurations"]}
    assert "target" in names and not names & {"a", "b", "n", "deep", "\xff"}  # nothing written


@pytest.mark.parametrize("label", list(HOSTILE))
def test_answering_an_interaction_refuses_hostile_json(api: httpx2.Client, label: str) -> None:
    body, word = HOSTILE[label]
    refused(api.post("/api/interactions/ia_unknown/answer", content=body), word, "bad_json")


def test_an_answer_of_the_wrong_shape_names_the_problem_without_validation_internals(
    api: httpx2.Client,
) -> None:
    r = api.post("/api/interactions/ia_unknown/answer", json={"action": "maybe"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_answer" and error["message"].startswith(
        "the answer is not valid: action:"
    )
    for internal in ("input_value", "pydantic", "https://", "validation error for"):
        assert internal not in r.text
    assert api.post("/api/interactions/ia_unknown/answer", json={"action": "cancel"}).status_code == 404


@contextlib.contextmanager
def browser(server: LiveServer) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=server.base_url, timeout=WAIT) as client:
        token = CSRF_RE.search(client.get("/login").text)
        assert token
        form = {"username": "alice", "password": "alice-password-1", "csrf_token": token.group(1)}
        assert client.post("/login", data=form).status_code == 303
        yield client


@pytest.mark.parametrize("label", list(HOSTILE))
def test_the_configuration_page_import_shows_a_clear_error_for_a_hostile_file(
    server: LiveServer, label: str
) -> None:
    body, word = HOSTILE[label]
    page_url = f"/projects/{SETTINGS_PROJECT}/config"
    with browser(server) as client:
        token = CSRF_RE.search(client.get(page_url).text)
        assert token
        r = client.post(
            f"{page_url}/import",
            data={"csrf_token": token.group(1), "mode": "merge"},
            files={"file": ("export.json", body, "application/json")},
            headers={"HX-Request": "true"},
        )
    text = html.unescape(r.text)
    assert r.status_code == 422, text
    assert "the export file is" in text and word in text
    assert "Traceback" not in text and "Recursion" not in text
