"""A run's configuration secrets are shown only to the run's own account, and never in logs.

Against a real `steamharness serve`: alice and bob both may use one project whose handler
returns `ctx.config` (alice's secret token among it, also inside a URL) and logs it (as
JSON and URL-encoded). alice calls the tool over MCP with her own configuration. Then:
- bob (a project member) on the run page and on `/api/runs/{id}`, and an administrator
  (browser and admin key) see the output, error-free timeline and report without the
  secret in any form (as is, JSON-escaped, URL-encoded, HTML-escaped), `[redacted]` instead;
- alice sees her own output with the secret, but the log lines on her run page are redacted;
- the server's own log never shows it, even when a request carries it in its URL."""

from __future__ import annotations

import contextlib
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import anyio
import httpx2
import pytest

from tests.e2e.server import LiveServer, make_server
from tests.e2e.test_http_mcp import sdk_client

PROJECT = "6d1e0b7a-3c2f-4e59-8a1d-2b3c4d5e6f70"
SECRET = 'tok/3n "é" x&y=1'
ALICE, BOB, ADA = ("alice", "redact-pw-alice"), ("bob", "redact-pw-bob"), ("ada", "redact-pw-ada")
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
WAIT = 60

HANDLER = """
import json
from urllib.parse import quote


def show(ctx):
    config = dict(ctx.config)
    ctx.log("config " + json.dumps(config))
    ctx.log("url https://api.example/v1?token=" + quote(config["token"], safe=""))
    return {"config": config, "url": "https://api.example/v1?token=" + quote(config["token"], safe="")}
"""


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "id": PROJECT,
        "name": "redaction-demo",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "Echoes its configuration.",
        "configuration": {
            "fields": [{"name": "region", "type": "string"}, {"name": "token", "type": "secret"}]
        },
        "entrypoints": [{"id": "show", "title": "Show", "handler": "main.py:show", "params": []}],
    }
    (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    (folder / "main.py").write_text(HANDLER, encoding="utf-8")
    return folder


def forms(secret: str) -> list[str]:
    """Every way the secret could show up in a page or a JSON document."""
    escaped = json.dumps(secret)[1:-1]
    return sorted(
        {
            secret,
            escaped,
            json.dumps(secret, ensure_ascii=False)[1:-1],
            quote(secret, safe=""),
            quote_plus(secret),
            html.escape(secret),
            html.escape(escaped),
            "tok/3n",  # any recognisable part of it
        }
    )


def leaks(text: str) -> list[str]:
    return [f for f in forms(SECRET) if f in text]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = make_server(tmp_path_factory.mktemp("redaction"))
    server.add_project(write_project(server.projects / "redaction"), PROJECT)
    for name, password in (ALICE, BOB):
        server.add_user(name, password=password)
        server.grant(name, [PROJECT])
    server.add_user(ADA[0], admin=True, password=ADA[1])
    with server.running():
        yield server


@pytest.fixture(scope="module")
def run_id(server: LiveServer) -> str:
    """alice's run with her secret configured: its id."""
    key = server.create_key("alice", projects=[PROJECT], scopes=["runs.create", "runs.read", "configs"])
    server.env["ALICE_KEY"] = key
    base = f"/api/workflows/{PROJECT}/configs"
    with httpx2.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
        etag = api.get(f"{base}/default").headers["etag"]
        values = {"token": SECRET, "region": "eu"}
        saved = api.patch(f"{base}/default", headers={"If-Match": etag}, json={"values": values})
        assert saved.status_code == 200, saved.text

    async def call() -> Any:
        async with sdk_client(server.mcp_url(PROJECT), key, "legacy") as client:
            with anyio.fail_after(WAIT):
                return await client.call_tool("show", {})

    result = anyio.run(call)
    assert not result.is_error, result
    payload = result.structured_content
    assert payload is not None
    assert payload["output"]["config"]["token"] == SECRET, payload  # the caller gets its own result
    return str(payload["runId"])


@contextlib.contextmanager
def browser(server: LiveServer, who: tuple[str, str]) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=server.base_url, timeout=30) as http:
        form = http.get("/login")
        token = CSRF_RE.search(form.text)
        assert token
        r = http.post("/login", data={"username": who[0], "password": who[1], "csrf_token": token.group(1)})
        assert r.status_code == 303, r.text
        yield http


def test_another_member_sees_the_run_page_with_the_secret_redacted(server: LiveServer, run_id: str) -> None:
    with browser(server, BOB) as bob:
        page = bob.get(f"/runs/{run_id}")
        assert page.status_code == 200
        assert leaks(page.text) == []
        assert "[redacted]" in page.text
        assert "eu" in page.text  # what is not secret stays
        fragment = bob.get(f"/runs/{run_id}", headers={"HX-Request": "true"})
        assert fragment.status_code == 200 and leaks(fragment.text) == []


def test_an_administrator_sees_the_run_page_with_the_secret_redacted(server: LiveServer, run_id: str) -> None:
    with browser(server, ADA) as ada:
        page = ada.get(f"/runs/{run_id}")
        assert page.status_code == 200
        assert leaks(page.text) == []
        assert "[redacted]" in page.text
        assert "config " in page.text, "the administrator sees the report, redacted"


def test_the_owner_sees_her_output_but_her_log_lines_are_redacted(server: LiveServer, run_id: str) -> None:
    with browser(server, ALICE) as alice:
        page = alice.get(f"/runs/{run_id}")
        assert page.status_code == 200
        output = page.text.split('id="report', 1)[0]
        assert "tok/3n" in output and "x&amp;y=1" in output, "the owner sees her own output"
        report = page.text.split('id="report', 1)[-1] if 'id="report' in page.text else page.text
        logs = re.findall(r"<pre>(config .*?|url .*?)</pre>", report, flags=re.S)
        assert len(logs) == 2, report
        assert all(leaks(line) == [] and "[redacted]" in line for line in logs)


def test_the_conversation_timeline_redacts_for_an_administrator(server: LiveServer, run_id: str) -> None:
    with browser(server, ADA) as ada:
        r = ada.get(f"/runs/{run_id}/timeline")
        assert r.status_code == 200, r.text
        assert leaks(r.text) == [] and "[redacted]" in r.text
    with browser(server, ALICE) as alice:
        r = alice.get(f"/runs/{run_id}/timeline")
        assert r.status_code == 200 and "tok/3n" in r.text
    with browser(server, BOB) as bob:
        assert bob.get(f"/runs/{run_id}/timeline").status_code == 404


def test_the_runs_api_redacts_for_everyone_but_the_owner(server: LiveServer, run_id: str) -> None:
    bob_key = server.create_key("bob", projects=[PROJECT], scopes=["runs.read"])
    for key, owner in ((bob_key, False), (server.admin_key, False), (server.env["ALICE_KEY"], True)):
        r = httpx2.get(
            f"{server.base_url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        if owner:
            assert data["output"]["config"]["token"] == SECRET
            assert quote(SECRET, safe="") in data["output"]["url"]
        else:
            assert leaks(r.text) == [], key
            assert data["output"]["config"]["token"] == "[redacted]"
            assert data["output"]["url"] == "https://api.example/v1?token=[redacted]"
        for event in data.get("events", []):  # the admin key's full view: log lines redacted
            assert leaks(json.dumps(event, ensure_ascii=False)) == []


def test_the_server_log_never_shows_the_secret(server: LiveServer, run_id: str) -> None:
    with browser(server, BOB) as bob:
        # A request that carries the secret in its URL: the access log line must not.
        assert bob.get(f"/runs/{run_id}", params={"note": SECRET}).status_code == 200
        assert bob.get(f"/runs?project={quote(SECRET, safe='')}").status_code == 200
    log = server.log()
    assert f"/runs/{run_id}" in log, "the access log records requests"
    assert leaks(log) == []
