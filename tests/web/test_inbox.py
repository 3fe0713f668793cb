"""Names that explain themselves (issue 38): the browser's page of pending questions is the
Inbox at /inbox (its first URLs, /conversations and /conversations/events, answer a 308 to
the new ones, query string kept), the host's external servers are "Connected MCP servers",
and what an MCP client is told names the Inbox's URL. The redirects' attacks are in
tests/security/test_inbox_redirects.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.web.conftest import INTERACTIVE, USER, Web, rendered
from webui.admin import create_key
from webui.web.state import app_state

pytestmark = pytest.mark.shares_app
MODERN = "2026-07-28"


def heading(html: str) -> str:
    match = re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S)
    assert match, html
    return match.group(1).strip()


def title(html: str) -> str:
    match = re.search(r"<title>(.*?)</title>", html, re.S)
    assert match, html
    return match.group(1).strip()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/conversations", "/inbox"),
        ("/conversations/events", "/inbox/events"),
        ("/conversations?x=1&y=a%20b", "/inbox?x=1&y=a%20b"),
        ("/conversations/events?since=3", "/inbox/events?since=3"),
    ],
)
def test_the_old_urls_answer_308_to_the_inbox_keeping_the_query(web: Web, old: str, new: str) -> None:
    for logged_in in (False, True):
        if logged_in:
            web.login(*USER)
        r = web.client.get(old, follow_redirects=False)
        assert r.status_code == 308, r.text
        assert r.headers["location"] == new


def test_a_bookmark_of_the_old_page_arrives_at_the_inbox(web: Web) -> None:
    web.login(*USER)
    r = web.client.get("/conversations")
    assert r.status_code == 200 and r.url.path == "/inbox"
    assert rendered(r).template == "conversations/list.html"
    web.logout()
    # logged out, the login page brings the person back to the new URL
    r = web.client.get("/conversations", follow_redirects=True)
    assert r.url.path == "/login" and r.url.params["next"] == "/inbox"


def test_the_inbox_is_titled_inbox_and_says_what_host_conversations_are(web: Web) -> None:
    web.login(*USER)
    r = web.client.get("/inbox")
    assert r.status_code == 200
    assert heading(r.text) == "Inbox" and title(r.text).startswith("Inbox")
    intro = r.text.split("</h1>", 1)[1].split("</p>", 1)[0]
    assert 'href="/host/conversations"' in intro and "host conversations" in intro
    assert 'href="/host/servers"' in intro and "connected MCP servers" in intro
    assert 'sse-connect="/inbox/events"' in r.text and "/conversations/events" not in r.text


def test_connected_servers_say_they_are_not_your_projects_servers(web: Web) -> None:
    web.login(*USER)
    r = web.client.get("/host/servers")
    assert r.status_code == 200
    assert heading(r.text) == "Connected MCP servers" and title(r.text).startswith("Connected MCP servers")
    assert "servers this host connects to" in r.text and "each project's MCP page" in r.text
    assert 'href="/conversations' not in r.text and 'href="/inbox"' in r.text


def _sse_or_json(text: str) -> dict[str, Any]:
    """The one JSON-RPC reply of a Streamable HTTP response, JSON or one SSE `data:`."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    [data] = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return json.loads(data)


def test_a_client_that_cannot_answer_is_sent_to_the_question_in_the_inbox(web: Web) -> None:
    services = app_state(web.client.app).services
    raw, _ = create_key(services.engine, user=USER[0], projects=None, scopes=None, name="inbox-hint")
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},  # no form elicitation
    }
    r = web.client.post(
        f"/api/workflows/{INTERACTIVE}/mcp?target=latest",
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {raw}",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "plan_trip",
        },
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "plan_trip", "arguments": {"traveller": "Ann"}, "_meta": meta},
        },
    )
    assert r.status_code == 200, r.text
    result = _sse_or_json(r.text)["result"]
    body = result["structuredContent"]
    assert result["isError"] is True and body["error"]["code"] == "interaction_required", body
    iid = body["error"]["interactionId"]
    message = body["error"]["message"]
    base = str(web.client.base_url).rstrip("/")
    assert f"Answer it in the browser at {base}/inbox#interaction-{iid}," in message
    assert "/conversations" not in message
