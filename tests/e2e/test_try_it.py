"""Try it on the MCP page against a real server: a person logs in through the form, runs a
tool from the page, and the server calls its own MCP endpoint with a server-side key the
browser never sees. The call shows up in the audit with the Try it user agent; a question
the run asks stays waiting for the inbox.

A real server's responses carry no template context (that is the TestClient's), so these
tests check the HTML, as a browser gets it; the page's data is checked on its context in
tests/web/test_mcp_page.py."""

from __future__ import annotations

import contextlib
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.server import HELLO, INTERACTIVE, LEDGER, LiveServer, running_server
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server

USER = ("ann", "ann-password-1")
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
RUN_LINK_RE = re.compile(r'href="/runs/([^"]+)"')


@contextlib.contextmanager
def logged_in(server: LiveServer) -> Iterator[httpx2.Client]:
    """A cookie-keeping client logged in through the login form, like a browser."""
    with httpx2.Client(base_url=server.base_url, timeout=TIMEOUT) as client:
        form = client.get("/login")
        token = CSRF_RE.search(form.text)
        assert form.status_code == 200 and token, form.text
        r = client.post(
            "/login",
            data={"username": USER[0], "password": USER[1], "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        yield client


def add_user(server: LiveServer) -> None:
    server.add_user(USER[0], password=USER[1])
    server.grant(USER[0], [HELLO, INTERACTIVE])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("try-it"), server_database_url) as live:
        add_user(live)
        yield live
    assert "Traceback" not in live.log()  # background calls and shutdown left no errors


@pytest.fixture
def browser(server: LiveServer) -> Iterator[httpx2.Client]:
    with logged_in(server) as client:
        yield client


def open_page(browser: httpx2.Client, project: str, target: str = "latest") -> tuple[str, str]:
    r = browser.get(f"/projects/{project}/mcp?target={target}")
    assert r.status_code == 200, r.text
    token = CSRF_RE.search(r.text)
    assert token
    return r.text, token.group(1)


def run_tool(
    browser: httpx2.Client, project: str, tool: str, fields: dict[str, str], *, htmx: bool = True
) -> httpx2.Response:
    _, csrf = open_page(browser, project)
    headers = {"HX-Request": "true", "X-CSRF-Token": csrf} if htmx else {}
    data = {"tool": tool, **fields, **({} if htmx else {"csrf_token": csrf})}
    return browser.post(f"/projects/{project}/mcp/try?target=latest", data=data, headers=headers)


def db_rows(server: LiveServer, table: str) -> list[dict[str, Any]]:
    return server.rows(table)


def test_try_it_runs_greet_through_the_endpoint_and_shows_its_output(
    server: LiveServer, browser: httpx2.Client
) -> None:
    r = run_tool(browser, HELLO, "greet", {"t1-name": "Ada", "t1-times": "2", "t1-language": "fr"})
    assert r.status_code == 200, r.text
    assert "<html" not in r.text and r.text.strip().startswith('<div id="t1-try"')
    assert '<span class="badge success">success</span>' in r.text
    output = re.search(r'<pre id="[^"]+-output">(.*?)</pre>', r.text, re.S)
    assert output and json.loads(html.unescape(output.group(1))) == {
        "greeting": "Bonjour, Ada! Bonjour, Ada!"
    }
    run_link = RUN_LINK_RE.search(r.text)
    assert run_link
    run = next(row for row in db_rows(server, "runs") if row["id"] == run_link.group(1))
    assert run["actor"] == "user:ann" and run["source"] == "mcp" and run["entrypoint_id"] == "greet"


def test_try_it_without_htmx_answers_with_the_whole_page_and_the_outcome(browser: httpx2.Client) -> None:
    r = run_tool(browser, HELLO, "echo", {"t2-text": "hi there"}, htmx=False)
    assert r.status_code == 200 and "<html" in r.text
    assert '<details class="try-it" open>' in r.text and "hi there" in html.unescape(r.text)
    assert '<span class="badge success">success</span>' in r.text


def test_a_question_from_the_run_is_interaction_required_and_waits_for_the_conversation_view(
    server: LiveServer, browser: httpx2.Client
) -> None:
    r = run_tool(browser, INTERACTIVE, "plan_trip", {"t1-traveller": "Bo"})
    assert r.status_code == 200, r.text
    assert "The run is waiting for input" in r.text
    assert 'href="/inbox"' in r.text
    run_link = RUN_LINK_RE.search(r.text)
    assert run_link
    run = next(row for row in db_rows(server, "runs") if row["id"] == run_link.group(1))
    assert run["status"] == "waiting_for_input"
    pending = [i for i in db_rows(server, "interactions") if i["run_id"] == run["id"]]
    assert [i["status"] for i in pending] == ["pending"]


def test_the_audit_names_try_it_as_the_source_of_its_tool_calls(
    server: LiveServer, browser: httpx2.Client
) -> None:
    r = run_tool(browser, HELLO, "greet", {"t1-name": "Audit"})
    run_link = RUN_LINK_RE.search(r.text)
    assert run_link
    rows = [row for row in db_rows(server, "audit_events") if row["run_id"] == run_link.group(1)]
    called = [row for row in rows if row["event"] == "run.created"]  # the call's, one row per fact
    assert len(called) == 1
    assert called[0]["user_agent"] == "steamharness-try-it"
    assert called[0]["actor"] == "user:ann" and called[0]["source"] == "mcp" and called[0]["tool"] == "greet"
    sessions = [
        row
        for row in db_rows(server, "audit_events")
        if row["event"] == "session.created" and row["session_id"] == called[0]["session_id"]
    ]
    assert [row["user_agent"] for row in sessions] == ["steamharness-try-it"]


def test_the_server_side_key_is_made_once_and_never_reaches_the_browser(
    server: LiveServer, browser: httpx2.Client
) -> None:
    pages = [run_tool(browser, HELLO, "greet", {"t1-name": "One"}).text]
    pages.append(run_tool(browser, HELLO, "greet", {"t1-name": "Two"}, htmx=False).text)
    for target in ("draft", "latest", "1.0.0"):
        pages.append(open_page(browser, HELLO, target)[0])
        pages.append(
            browser.get(f"/projects/{HELLO}/mcp?target={target}", headers={"HX-Request": "true"}).text
        )
    keys = db_rows(server, "api_keys")
    try_it = [k for k in keys if k["name"] == "try-it (server-side)"]
    assert len(try_it) == 1 and try_it[0]["revoked_at"] is None
    assert try_it[0]["scopes"] == ["runs.create"]
    for text in pages:
        for key in keys:
            public = "shk_" + key["id"].removeprefix("key_") + "_"
            assert key["secret_hash"] not in text and public not in text


def test_a_user_without_a_grant_cannot_try_a_tool(browser: httpx2.Client) -> None:
    _, csrf = open_page(browser, HELLO)
    r = browser.post(
        f"/projects/{LEDGER}/mcp/try?target=latest",
        data={"tool": "post_entry", "t1-amount": "1"},
        headers={"HX-Request": "true", "X-CSRF-Token": csrf},
    )
    assert r.status_code == 404


def test_the_server_side_key_is_revoked_when_the_server_stops(tmp_path: Path) -> None:
    with running_server(tmp_path) as live:
        add_user(live)
        with logged_in(live) as browser:
            r = run_tool(browser, HELLO, "greet", {"t1-name": "Bye"})
            assert '<span class="badge success">success</span>' in r.text
        (key,) = [k for k in db_rows(live, "api_keys") if k["name"] == "try-it (server-side)"]
        assert key["revoked_at"] is None
        assert live.stop() in (0, -15), live.log()[-3000:]  # uvicorn re-raises SIGTERM after a clean exit
    (key,) = [k for k in db_rows(live, "api_keys") if k["id"] == key["id"]]
    assert key["revoked_at"] is not None
    revoked = [row for row in db_rows(live, "audit_events") if row["event"] == "key.revoked"]
    assert [row["details"]["keyId"] for row in revoked] == [key["id"]]
