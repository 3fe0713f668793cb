"""Attack pass on issue 38's new surfaces: the download of a file a run created, as someone
other than the run's account.

A run's configuration secrets are hidden from anyone but its own account wherever the run
is shown (`webui.web.runs_pages.RunRedaction`): the run page lists a created file under its
name with them redacted. The download's `Content-Disposition` (what the browser saves the
file as, whatever the link's text) must hide them the same way: another account granted the
project, or an administrator, never gets the secret through a file's name.

In-process (the page-test app behind a TestClient), reusing the download tests' site."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
import pytest

from tests.helpers import WAIT
from tests.security.test_created_file_downloads import Site, add_file, prepared_account, site, url
from tests.web.conftest import HELLO, audit, rendered, services
from webui.admin import revoke_key, set_project_grants
from webui.blocking import DatabaseBusy
from webui.mcp.binding import base_url
from webui.mcp.results import file_links
from webui.store import runs as run_store
from webui.store.models import Run

__all__ = ["site"]  # the fixture, used by name

SECRET = "sk-live-9f8e7d6c5b4a39281706"


def configured_run(site: Site) -> str:
    """alice's run that started with a sealed (secret) configuration value."""
    svc = services(site.web)
    account = prepared_account(site.web, "alice")
    sealed = svc.configs.box.seal(SECRET, binding=f"{HELLO}/{account}/token")
    run = Run(
        id="run-configured38",
        project_id=HELLO,
        entrypoint_id="greet",
        entrypoint_title="Greet",
        status="success",
        source="mcp",
        actor="user:alice",
        account_id=account,
        config_name="prod",
        config_revision=1,
        config_values={"token": sealed},
    )
    run_store.create_run(svc.engine, run=run)
    return run.id


def test_a_created_files_name_never_carries_the_runs_secret_to_another_account(site: Site) -> None:
    run_id = configured_run(site)
    row = add_file(site.web, run_id, f"dump-{SECRET}.txt", b"data", "text/plain")
    link = url(run_id, row.id)
    # the run's own account gets the name as it is
    mine = site.get(link, "alice")
    assert mine.status_code == 200 and SECRET in unquote(mine.headers["content-disposition"])
    # the run page hides it from bob (granted the project)...
    site.login("bob")
    page = site.client.get(f"/runs/{run_id}")
    assert page.status_code == 200 and SECRET not in page.text
    assert [f.name for f in rendered(page).context["files"]] != [row.name]
    # ...and so does the download, by his session, his key, or the admin key
    by_session = site.client.get(link)
    site.client.cookies.clear()
    for r in (by_session, site.get(link, "bob"), site.get(link, "bob-read"), site.get(link, "admin")):
        assert r.status_code == 200 and r.content == b"data"
        shown = unquote(r.headers["content-disposition"])
        assert SECRET not in shown and SECRET[:12] not in shown, shown


# --------------------------------------------------------------------------- held downloads

CAP = 8  # STEAMHARNESS_MAX_DOWNLOADS_PER_ACCOUNT's default


def stalled_download(site: Site, link: str, key: str) -> tuple[Future[None], threading.Event]:
    """A download whose client never reads: the app's send of the first bytes never returns,
    as a peer that stops reading holds uvicorn's send (it waits for the socket to drain, with
    no timeout). Runs on the TestClient's event loop; `started` is set once the response began."""
    started = threading.Event()
    portal = site.client.portal
    assert portal is not None
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "path": link,
        "raw_path": link.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {key}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
        "extensions": {},
        "state": {},
    }

    async def receive() -> dict[str, Any]:
        if not started.is_set():
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message
        if message["type"] == "http.response.body":
            started.set()
            await anyio.sleep_forever()  # the peer reads nothing

    async def run() -> None:
        await site.client.app(scope, receive, send)  # type: ignore[arg-type]

    return portal.start_task_soon(run), started


def test_one_account_cannot_hold_every_connection_with_downloads_it_never_reads(site: Site) -> None:
    """A download is a long-lived response (the peer paces it), like an inbox stream: one
    account holds at most CAP at once, the next is refused at once with 429 saying why, another
    account still downloads, and a slot comes back when a held download ends."""
    row = add_file(site.web, site.run_id, "big.bin", b"x" * 4096, "application/octet-stream")
    link = url(site.run_id, row.id)
    held: list[Future[None]] = []
    try:
        for _ in range(CAP):
            future, started = stalled_download(site, link, site.keys["bob"])
            held.append(future)
            assert started.wait(WAIT)
        refused = site.get(link, "bob")
        assert refused.status_code == 429, refused.status_code
        assert refused.json()["error"]["code"] == "too_many_downloads"
        assert str(CAP) in refused.json()["error"]["message"]
        # another key of bob's is bob too; alice is another account
        assert site.get(link, "bob-read").status_code == 429
        assert site.get(link, "alice").content == b"x" * 4096
        held.pop().cancel()
        deadline = time.monotonic() + WAIT
        while (r := site.get(link, "bob")).status_code == 429 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.status_code == 200 and r.content == b"x" * 4096
    finally:
        for future in held:
            future.cancel()


# --------------------------------------------------------------------------- what held


def test_a_revoked_grant_and_a_revoked_key_download_nothing(site: Site) -> None:
    svc = services(site.web)
    row = add_file(site.web, site.run_id, "notes.txt", b"hello", "text/plain")
    link = url(site.run_id, row.id)
    site.login("bob")
    assert site.client.get(link).content == b"hello"
    assert site.get(link, "bob").content == b"hello"
    bob = prepared_account(site.web, "bob")
    set_project_grants(svc.engine, account_id=bob, projects=set(), actor="admin")
    assert site.client.get(link).status_code == 404  # the same session, the grant gone
    assert site.get(link, "bob").status_code == 404
    site.client.cookies.clear()
    key_id = "key_" + site.keys["alice"].split("_")[1]
    revoke_key(svc.engine, key_id=key_id)
    revoked = site.get(link, "alice")
    assert revoked.status_code == 401 and b"hello" not in revoked.content
    assert 'error="invalid_token"' in revoked.headers["www-authenticate"]
    assert site.get(link, "admin").content == b"hello"  # the administrator still reads it


def test_no_file_leaves_unaudited_when_the_database_is_busy_and_its_place_comes_back(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The download's audit event is written before any byte; a database too busy to take it
    refuses the download (503, nothing of the file) and gives its place back."""
    svc = services(site.web)
    row = add_file(site.web, site.run_id, "notes.txt", b"secret-bytes", "text/plain")
    link = url(site.run_id, row.id)
    real = svc.audit.record_alone

    def busy(*args: Any, **kwargs: Any) -> None:
        raise DatabaseBusy("the database is busy")

    monkeypatch.setattr(svc.audit, "record_alone", busy)
    for _ in range(CAP + 2):
        r = site.get(link, "bob")
        assert r.status_code == 503 and b"secret-bytes" not in r.content
    monkeypatch.setattr(svc.audit, "record_alone", real)
    assert site.get(link, "bob").content == b"secret-bytes"
    assert len(audit(site.web, "file.downloaded")) == 1


def asgi_get(site: Site, link: str, key: str, on_start: Any) -> tuple[int, bytes, bool]:
    """GET `link` through the app itself, calling `on_start()` as the response begins; the
    status, the body and whether it ended."""
    portal = site.client.portal
    assert portal is not None
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "path": link,
        "raw_path": link.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {key}".encode())],
        "client": ("127.0.0.1", 50001),
        "server": ("127.0.0.1", 80),
        "extensions": {},
        "state": {},
    }
    status, body, ended = 0, bytearray(), False
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, ended
        if message["type"] == "http.response.start":
            status = message["status"]
            on_start()
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))
            ended = not message.get("more_body", False)

    async def run() -> None:
        with anyio.fail_after(WAIT):
            await site.client.app(scope, receive, send)  # type: ignore[arg-type]

    portal.call(run)
    return status, bytes(body), ended


def test_a_file_removed_as_its_download_begins_still_arrives_whole(site: Site) -> None:
    """What the 200 announced (its Content-Length) is what is sent: the file is open before
    the response begins, so removing it then (a clean-up, an operator) cuts nothing short."""
    data = b"0123456789" * 1000
    row = add_file(site.web, site.run_id, "notes.txt", data, "text/plain")
    status, body, ended = asgi_get(
        site, url(site.run_id, row.id), site.keys["bob"], lambda: os.unlink(row.storage)
    )
    assert (status, body, ended) == (200, data, True)


def test_a_resource_link_points_at_the_public_url_or_the_checked_host_never_a_forwarded_one() -> None:
    """The link a client follows with its Bearer key: the configured public URL, else the
    request's own Host (the guard has checked it against the allowed hosts; h11 refuses a
    second Host), never X-Forwarded-Host or Forwarded; hostile ids stay inside its path."""
    forged = [
        (b"host", b"127.0.0.1:8000"),
        (b"x-forwarded-host", b"evil.example"),
        (b"forwarded", b"host=evil"),
    ]
    assert base_url({"type": "http", "scheme": "http", "headers": forged}) == "http://127.0.0.1:8000"
    views = [{"id": "../../../x?y#@evil.example/", "name": "a.txt", "mimeType": "text/plain", "size": 1}]
    (link,) = file_links("run/../..@evil", views, "https://mcp.example.com/")
    uri = urlsplit(str(link.uri))
    assert (uri.scheme, uri.netloc, uri.query, uri.fragment) == ("https", "mcp.example.com", "", "")
    assert uri.path.startswith("/api/runs/") and uri.path.count("/") == 5
