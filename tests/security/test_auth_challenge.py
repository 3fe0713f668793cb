"""A refused key reads as a refused key, not as an OAuth problem (issue 38, item 2), against
the real app in memory:

- every 401 of the MCP endpoint and of the JSON API carries `WWW-Authenticate: Bearer
  realm="steamharness", error="invalid_token", error_description="…"`, a well-formed RFC 6750
  challenge whatever the request carried: the description is the server's own sentence and
  base URL, never the key, the path, the query or a hostile Host;
- the OAuth discovery, registration, authorization and token paths the SDK clients and the MCP
  Inspector probe answer a 404 that says this server takes API keys, for every method and
  whatever follows them, without any database work, the same to a valid key, a bad key and
  none (no way to test keys past the throttle), and never the login page's redirect.

tests/e2e/test_wrong_key_clients.py runs the real clients against a live server."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import event

from tests import prepared
from tests.e2e.server import HELLO
from webui.app import create_app
from webui.auth.challenge import DESCRIPTION_MAX, bearer_challenge, header_safe
from webui.settings import Settings
from webui.web.state import app_state

PV = "2025-11-25"
MCP = f"/api/workflows/{HELLO}/mcp?target=latest"
# RFC 6750 section 3: the challenge's parameters, each value a quoted-string of its restricted set.
QDTEXT = r"[\x20\x21\x23-\x5b\x5d-\x7e]*"
CHALLENGE = re.compile(
    rf'Bearer realm="steamharness", error="invalid_token", error_description="(?P<description>{QDTEXT})"'
)
HINT = "This server takes API keys: send Authorization: Bearer <key> (create one at {base}/keys)"
# What the clients probe (read in the Python SDK's mcp/client/auth, the TypeScript SDK's
# client/auth.js and the Inspector's CLI bundle; seen on the wire in test_wrong_key_clients.py),
# and the variants with a path after them.
PROBED = [
    f"/.well-known/oauth-protected-resource/api/workflows/{HELLO}/mcp",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/tenant",
    "/.well-known/openid-configuration",
    "/.well-known/openid-configuration/tenant",
    "/register",
    "/authorize?response_type=code&client_id=x&redirect_uri=http%3A%2F%2F127.0.0.1%3A1%2F",
    "/token",
]


def mcp_headers(authorization: str | bytes | None = None, **extra: str) -> dict[str, Any]:
    headers: dict[str, Any] = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PV,
        **extra,
    }
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


def initialize() -> dict[str, Any]:
    params = {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


@pytest.fixture(scope="module")
def admin_key() -> str:
    return secrets.token_urlsafe(32)


def _client(data: Path, admin_key: str, **settings: Any) -> TestClient:
    app = create_app(Settings(data_dir=data, server_admin_key=SecretStr(admin_key), **settings))
    return TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, admin_key: str) -> Iterator[TestClient]:
    data = prepared.copy_prepared("web", tmp_path_factory.mktemp("challenge") / "data")
    with _client(data, admin_key) as c:
        yield c


def description(response: Any) -> str:
    """The challenge's description, the challenge checked to be RFC 6750's form."""
    value = response.headers["www-authenticate"]
    match = CHALLENGE.fullmatch(value)
    assert match, value
    return match.group("description")


# --------------------------------------------------------------------------- the challenge


def test_every_401_of_the_mcp_endpoint_says_what_was_wrong_and_that_the_server_takes_api_keys(
    client: TestClient,
) -> None:
    hint = HINT.format(base="http://127.0.0.1")
    cases = {
        "no key": (mcp_headers(), "missing Authorization: Bearer <API key>"),
        "wrong key": (mcp_headers("Bearer shk_000000000000_nope"), "invalid API key"),
        "garbage": (mcp_headers("Bearer not-a-key"), "invalid API key"),
        "Basic": (mcp_headers("Basic YWxpY2U6cGFzcw=="), "only Authorization: Bearer <API key> is accepted"),
        "empty Bearer": (mcp_headers("Bearer"), "empty Bearer credential"),
        "cookie": (mcp_headers(Cookie="steamharness_session=abc"), "a browser session cannot"),
    }
    for name, (headers, reason) in cases.items():
        for method in ("POST", "GET", "DELETE"):
            body = initialize() if method == "POST" else None
            r = client.request(method, MCP, headers=headers, json=body)
            assert r.status_code == 401, (name, method, r.text)
            said = description(r)
            assert said.startswith(reason) and said.endswith(hint), (name, said)
            assert r.json()["error"]["code"] == -32001  # the body is unchanged
    r = client.post(MCP + "&api_key=shk_000000000000_nope", headers=mcp_headers(), json=initialize())
    assert r.status_code == 401 and description(r).startswith("credentials in the query string are refused")


def test_every_401_of_the_json_api_carries_the_same_challenge(client: TestClient) -> None:
    hint = HINT.format(base="http://127.0.0.1")
    # Authenticated by the guard, before the route: no key and a wrong key.
    for authorization, reason in ((None, "missing Authorization"), ("Bearer shk_0_x", "invalid API key")):
        headers = {} if authorization is None else {"Authorization": authorization}
        r = client.get("/api/whoami", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        said = description(r)
        assert said.startswith(reason) and said.endswith(hint), said
    # A route that also takes the browser session refuses in the route itself (app's handler).
    r = client.get(f"/api/workflows/{HELLO}/configs")
    assert r.status_code == 401 and description(r).startswith(
        "missing Authorization: Bearer <API key> (or log in"
    )


def test_the_challenge_names_the_public_url_when_one_is_set_never_the_requests_host(
    tmp_path: Path, admin_key: str
) -> None:
    data = prepared.copy_prepared("web", tmp_path / "data")
    with _client(data, admin_key, public_url="https://mcp.example.com", allowed_hosts=["evil.example"]) as c:
        for r in (
            c.post(MCP, headers=mcp_headers("Bearer bad", Host="evil.example"), json=initialize()),
            c.get("/api/whoami", headers={"Host": "evil.example"}),
        ):
            said = description(r)
            assert said.endswith(HINT.format(base="https://mcp.example.com")) and "evil" not in said
        r = c.get("/register", headers={"Host": "evil.example"})
        assert "https://mcp.example.com/keys" in r.json()["error_description"] and "evil" not in r.text


def test_the_challenge_never_reflects_what_the_request_carried(client: TestClient) -> None:
    expected = bearer_challenge("invalid API key", "http://127.0.0.1")
    hostile_keys: list[str | bytes] = [
        'shk_0_"x", error="insufficient_scope',
        "shk_0_\\\\x",
        ("shk_0_" + "é" * 40).encode(),  # raw UTF-8 bytes on the wire
        "shk_0_" + "A" * 20_000,
        "shk_0_ ,realm=evil",
        "<script>alert(1)</script>",
    ]
    for key in hostile_keys:
        authorization: Any = b"Bearer " + key if isinstance(key, bytes) else f"Bearer {key}"
        r = client.post(
            MCP + "&x=%22%0d%0aSet-Cookie:a", headers=mcp_headers(authorization), json=initialize()
        )
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == expected, key
        assert "set-cookie" not in r.headers
    # A project id of quotes and CRLF in the path: the same fixed challenge.
    path = "/api/workflows/%22%0d%0ax:y/mcp"
    r = client.post(path, headers=mcp_headers("Bearer nope"), json=initialize())
    assert r.status_code == 401 and r.headers["www-authenticate"] == expected
    # A Host the server does not serve is refused before any credential is looked at.
    r = client.post(MCP, headers=mcp_headers("Bearer nope", Host='127.0.0.1"x'), json=initialize())
    assert r.status_code == 421 and "www-authenticate" not in r.headers


def test_the_description_is_always_a_valid_quoted_string() -> None:
    hostile = 'a"b\\c\r\nd\x00e\x7ff\u2028g\U0001f600h' + "x" * 1000
    safe = header_safe(hostile)
    assert re.fullmatch(QDTEXT, safe) and len(safe) == DESCRIPTION_MAX
    assert safe.startswith("a?b?c??d?e?f?g?h")
    assert CHALLENGE.fullmatch(bearer_challenge(hostile, 'http://h"\r\n'))
    assert header_safe("short") == "short"


# --------------------------------------------------------------------------- discovery 404s


@pytest.mark.parametrize("path", PROBED)
def test_every_probed_oauth_path_answers_a_clear_404_for_every_method(client: TestClient, path: str) -> None:
    for method in ("GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"):
        r = client.request(method, path, json={"redirect_uris": ["x"]}, follow_redirects=False)
        assert r.status_code == 404, (method, path, r.status_code)
        if method == "HEAD":
            continue
        assert r.headers["content-type"] == "application/json"
        doc = r.json()
        assert doc["error"] == "oauth_not_offered", doc
        assert doc["error_description"].startswith("This server does not offer OAuth: it takes API keys.")
        assert "http://127.0.0.1/keys" in doc["error_description"]


def test_discovery_answers_the_same_to_every_key_and_does_no_database_work(
    client: TestClient, admin_key: str
) -> None:
    engine = app_state(client.app).services.engine
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        answers = {
            (path, key): client.get(path, headers={} if key is None else {"Authorization": f"Bearer {key}"})
            for path in PROBED
            for key in (None, admin_key, "shk_000000000000_nope", 'x"\\')
        }
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert statements == []
    for path in PROBED:
        seen = {(r.status_code, r.content) for (p, _), r in answers.items() if p == path}
        assert len(seen) == 1, seen  # a valid key, a bad one and none: one answer


def test_bad_keys_at_the_discovery_paths_are_not_checked_nor_counted_and_the_throttle_still_holds(
    tmp_path: Path, admin_key: str
) -> None:
    data = prepared.copy_prepared("web", tmp_path / "data")
    with _client(data, admin_key, bearer_failures_per_address=3, throttle_hold_seconds=0.01) as c:
        for n in range(20):
            r = c.get("/.well-known/oauth-authorization-server", headers={"Authorization": f"Bearer bad{n}"})
            assert r.status_code == 404
        statuses = [
            c.post(MCP, headers=mcp_headers(f"Bearer shk_{n:012d}_x"), json=initialize()).status_code
            for n in range(5)
        ]
        # The 20 probes counted nothing: the first bad keys at the endpoint are still 401s.
        assert statuses[:3] == [401, 401, 401] and statuses[3:] == [429, 429]
        r = c.post("/register", headers={"Authorization": "Bearer shk_000000000000_x"})
        assert r.status_code == 404  # throttled or not, discovery says the same and checks nothing


def test_the_discovery_paths_are_not_pages_behind_the_login(client: TestClient) -> None:
    client.cookies.clear()
    for path in ("/authorize", "/token", "/register"):
        r = client.get(path, headers={"Accept": "text/html"}, follow_redirects=False)
        assert r.status_code == 404 and "location" not in r.headers
        assert r.json()["error"] == "oauth_not_offered"
