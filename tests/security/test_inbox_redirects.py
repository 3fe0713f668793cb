"""The inbox's old URLs (/conversations, /conversations/events) redirect to /inbox: attacked
as an open redirect and a header injection. The Location is always this server's own
/inbox or /inbox/events, whatever the path, Host, forwarding headers or query say; the query
string is carried over percent-encoded, so no byte of it ends the header or adds one.
The raw requests go straight to the app (ASGI), as a proxy or a hand-made client could send
them, bytes no HTTP client library would put on the wire included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.types import Message

from tests.web.conftest import USER, Web, prepare, running

Headers = list[tuple[bytes, bytes]]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """One app for the module: every test here only reads."""
    with running(prepare(tmp_path_factory.mktemp("inbox-redirects") / "data")) as shared:
        yield shared


@pytest.fixture
def web(site: Web) -> Iterator[Web]:
    site.logout()
    yield site
    site.logout()


def raw_get(web: Web, path: str, query: bytes = b"", headers: Headers | None = None) -> tuple[int, Headers]:
    """GET `path`?`query` as raw ASGI bytes on the running app: the status and headers."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [(b"host", b"127.0.0.1"), *(headers or [])],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[Message] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    async def go() -> None:
        await web.client.app(scope, receive, send)

    assert web.client.portal is not None
    web.client.portal.call(go)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], list(start["headers"])


def locations(headers: Headers) -> list[bytes]:
    return [value for name, value in headers if name.lower() == b"location"]


@pytest.mark.parametrize(
    "path",
    [
        "/conversations//evil.com",
        "/conversations/%2F%2Fevil.com",
        "/conversations/%2f%2fevil.com",
        "/conversations/..%2F..%2Fevil.com",
        "/conversations/https://evil.com",
        "/conversations/\\\\evil.com",
        "/conversations/events//evil.com",
        "/conversations/events/%2F%2Fevil.com",
    ],
)
def test_no_path_under_the_old_url_redirects_anywhere(web: Web, path: str) -> None:
    for logged_in in (False, True):
        if logged_in:
            web.login(*USER)
        r = web.client.get(path, follow_redirects=False)
        if r.status_code in (301, 302, 303, 307, 308):
            # only a login page of this server may be where it leads (an unknown path is
            # otherwise 404)
            target = urlsplit(r.headers["location"])
            assert target.netloc == "" and target.path == "/login", r.headers["location"]
        else:
            assert r.status_code == 404, (path, r.status_code)
        assert "evil.com" not in r.headers.get("location", "").split("?", 1)[0]


@pytest.mark.parametrize(
    "query",
    [
        "next=//evil.com",
        "next=https://evil.com/&to=%2F%2Fevil.com",
        "@evil.com",
        "x=1#@evil.com",
        "/../../evil.com",
    ],
)
def test_a_hostile_query_stays_a_query_of_the_inbox(web: Web, query: str) -> None:
    for old, new in (("/conversations", "/inbox"), ("/conversations/events", "/inbox/events")):
        status, headers = raw_get(web, old, query.encode())
        assert status == 308
        [location] = locations(headers)
        target = urlsplit(location.decode("ascii"))
        assert (target.scheme, target.netloc, target.path) == ("", "", new), location
        assert location.startswith(f"{new}?".encode())


def test_the_host_and_forwarding_headers_never_reach_the_location(web: Web) -> None:
    forged = [
        (b"x-forwarded-host", b"evil.com"),
        (b"x-forwarded-proto", b"https"),
        (b"forwarded", b"host=evil.com;proto=https"),
    ]
    status, headers = raw_get(web, "/conversations", b"a=1", [*forged])
    assert status == 308 and locations(headers) == [b"/inbox?a=1"]
    scope_host = [(b"host", b"evil.com")]
    status, headers = raw_get(web, "/conversations/events", b"", scope_host)
    assert status == 308 and locations(headers) == [b"/inbox/events"]


@pytest.mark.parametrize(
    "query",
    [
        b"a=1\r\nSet-Cookie: session=stolen",
        b"a=1\nLocation: https://evil.com",
        b"a=1\r\n\r\n<script>alert(1)</script>",
        b"a=\x00\x7f\xff\xfe",
        b"a=%0d%0aSet-Cookie:%20x=1",
        b'a="<>`{|}^ \\',
    ],
)
def test_a_query_cannot_split_the_header_or_add_one(web: Web, query: bytes) -> None:
    status, headers = raw_get(web, "/conversations", query)
    assert status == 308
    [location] = locations(headers)
    assert location.startswith(b"/inbox?")
    # every byte printable ASCII with no space: nothing can end the header or the URL
    assert all(0x21 <= byte <= 0x7E for byte in location), location
    assert not any(name.lower() == b"set-cookie" for name, _ in headers)
    assert b"<" not in location and b'"' not in location and b" " not in location
    # percent-encoded bytes already in the query are kept as they are, not decoded
    if b"%0d%0a" in query:
        assert b"%0d%0a" in location


def test_only_get_is_redirected(web: Web) -> None:
    r = web.client.post("/conversations", data={"a": "1"}, follow_redirects=False)
    assert r.status_code == 405 and "location" not in r.headers
