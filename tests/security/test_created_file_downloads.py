"""Downloading a file a run created (`GET /api/runs/{run_id}/files/{file_id}`) as attacked:
only whoever may read the run gets it (its owner, another account granted the project, an
administrator; a Bearer key or the browser session), everyone else the same 404 as for an
id that does not exist, a stranger 401; a file is named only under its own run; any name a
workflow gives a file makes one safe `Content-Disposition: attachment` header; nothing is
ever served as a page (HTML, SVG, script: `application/octet-stream`, `nosniff`, a
sandboxing CSP); each download is audited. The run page lists the files, names escaped.

In-process (the page-test app behind a TestClient); the files are adopted into the store
as `ctx.files.create` does, under runs written directly."""

from __future__ import annotations

import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from email.utils import collapse_rfc2231_value
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from tests import prepared
from tests.web.conftest import HELLO, INTERACTIVE, Web, audit, prepare, rendered, services
from webui.admin import create_key, grant_projects
from webui.app import create_app
from webui.files.download import content_disposition
from webui.settings import Settings
from webui.store import runs as run_store
from webui.store.models import ManagedFile, Run
from webui.web.state import app_state

ADMIN_KEY = "admin-" + "k" * 40
PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-1", "carol": "carol-password-1"}
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
HOSTILE_NAMES = [
    '"; filename=evil.html',
    "report\r\nSet-Cookie: stolen=1\r\n\r\n<script>alert(1)</script>.txt",
    "../../x",
    "..\\..\\windows\\evil.bat",
    "résumé – 東京 🚀.txt",
    "%22%0d%0a.txt",
    "a\x00b\x1bc\x7fd.txt",
    "x" * 10_000 + ".html",
]


@dataclass
class Site:
    web: Web
    keys: dict[str, str]
    run_id: str

    @property
    def client(self) -> TestClient:
        return self.web.client

    def get(self, url: str, who: str | None) -> Any:
        headers = {"Authorization": f"Bearer {self.keys[who]}"} if who is not None else {}
        return self.client.get(url, headers=headers)

    def login(self, name: str) -> None:
        page = self.client.get("/login")
        token = CSRF_RE.search(page.text)
        assert token
        r = self.client.post(
            "/login",
            data={"username": name, "password": PASSWORDS[name], "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text


def add_run(web: Web, owner: str, project: str = HELLO) -> str:
    svc = services(web)
    account = prepared_account(web, owner)
    run = Run(
        id=f"run-{secrets.token_hex(6)}",
        project_id=project,
        entrypoint_id="greet",
        entrypoint_title="Greet",
        status="success",
        source="mcp",
        actor=f"user:{owner}",
        account_id=account,
    )
    run_store.create_run(svc.engine, run=run)
    return run.id


def prepared_account(web: Web, name: str) -> int:
    from webui.store import accounts as account_store

    found = account_store.get_account(services(web).engine, name=name)
    assert found is not None and found.id is not None
    return found.id


def add_file(
    web: Web, run_id: str, name: str, data: bytes, mime_type: str, project: str = HELLO
) -> ManagedFile:
    """A file adopted as `ctx.files.create` adopts it (from a file the worker staged)."""
    svc = services(web)
    with tempfile.TemporaryFile() as src:
        src.write(data)
        src.seek(0)
        return svc.files.adopt(
            project_id=project,
            src=src,
            name=name,
            mime_type=mime_type,
            run_id=run_id,
            created_dir=svc.runs.calls.file_create_dir,
        )


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    config = Settings(data_dir=prepare(tmp_path / "data").data_dir, server_admin_key=SecretStr(ADMIN_KEY))
    with TestClient(create_app(config), base_url="http://127.0.0.1") as client:
        web = Web(client, config)
        engine = services(web).engine
        registry = app_state(client.app).registry
        keys = {"admin": ADMIN_KEY}
        for name, password in PASSWORDS.items():
            prepared.add_user(engine, name, password, admin=False)
        # alice owns the run; bob may use the same project; carol only another one.
        grant_projects(engine, user="alice", projects=[HELLO], registry=registry)
        grant_projects(engine, user="bob", projects=[HELLO], registry=registry)
        grant_projects(engine, user="carol", projects=[INTERACTIVE], registry=registry)
        for name in PASSWORDS:
            keys[name], _ = create_key(engine, user=name, projects=None, scopes=None, name="t")
        keys["bob-read"], _ = create_key(engine, user="bob", projects=None, scopes=["runs.read"], name="r")
        keys["bob-configs"], _ = create_key(engine, user="bob", projects=None, scopes=["configs"], name="c")
        yield Site(web, keys, add_run(web, "alice"))


def url(run_id: str, file_id: str) -> str:
    return f"/api/runs/{run_id}/files/{file_id}"


def test_who_may_read_the_run_gets_the_file_everyone_else_404_or_401(site: Site) -> None:
    web = site.web
    row = add_file(web, site.run_id, "notes.txt", b"hello\n", "text/plain")
    link = url(site.run_id, row.id)
    for who in ("alice", "bob", "bob-read", "admin"):
        r = site.get(link, who)
        assert r.status_code == 200, (who, r.text)
        assert r.content == b"hello\n" and r.headers["content-type"] == "text/plain"
    unknown = site.get(url(site.run_id, "wf_" + "0" * 16), "alice")
    assert unknown.status_code == 404
    for who in ("carol", "bob-configs"):  # another project's account; a key without a runs scope
        r = site.get(link, who)
        assert r.status_code == 404, (who, r.text)
        # the same answer as for a run that does not exist: its id is not confirmed
        nothing = site.get(url("run-nope", row.id), who).json()
        assert r.json() == {"error": {**nothing["error"], "message": f"run {site.run_id!r} not found"}}
    assert site.get(link, None).status_code == 401
    bad = site.client.get(link, headers={"Authorization": "Bearer shk_000000000000_nope"})
    assert bad.status_code == 401
    assert b"hello" not in bad.content


def test_a_file_is_found_only_under_the_run_that_created_it(site: Site) -> None:
    web = site.web
    theirs = add_run(web, "carol", INTERACTIVE)
    row = add_file(web, theirs, "secret.txt", b"carol's", "text/plain", INTERACTIVE)
    mine = add_file(web, site.run_id, "mine.txt", b"alice's", "text/plain")
    # alice names carol's file under her own run: 404, nothing of it sent
    r = site.get(url(site.run_id, row.id), "alice")
    assert r.status_code == 404 and b"carol" not in r.content
    # an uploaded file (no run) is never a run's file
    up = site.client.post(
        f"/api/workflows/{HELLO}/files",
        params={"fileName": "up.txt"},
        content=b"uploaded",
        headers={"Authorization": f"Bearer {site.keys['alice']}", "Content-Type": "application/octet-stream"},
    )
    assert up.status_code == 201
    assert site.get(url(site.run_id, up.json()["data"][0]["id"]), "alice").status_code == 404
    # path tricks in either id are refused, not resolved
    for bad in (f"{mine.id}/..", "..%2F..%2Fetc%2Fpasswd", "%2e%2e", "x" * 5000):
        assert site.get(url(site.run_id, bad), "alice").status_code in (404, 422)
    assert site.get(url("x" * 5000, mine.id), "alice").status_code in (404, 422)


def test_the_browser_session_downloads_with_the_same_rule(site: Site) -> None:
    web = site.web
    row = add_file(web, site.run_id, "notes.txt", b"hello\n", "text/plain")
    link = url(site.run_id, row.id)
    site.login("bob")
    assert site.client.get(link).content == b"hello\n"
    site.client.cookies.clear()
    site.login("carol")
    assert site.client.get(link).status_code == 404
    site.client.cookies.clear()
    assert site.client.get(link).status_code == 401
    events = audit(web, "file.downloaded")
    assert [(e.actor, e.source, e.run_id) for e in events] == [("user:bob", "ui", site.run_id)]
    assert events[0].details == {"fileId": row.id, "size": 6}


def disposition(value: str) -> list[tuple[str, Any]]:
    """The header's parameters as the standard library's RFC 2231 parser reads them."""
    msg = Message()
    msg["Content-Disposition"] = value
    return list(msg.get_params(header="content-disposition") or [])


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_any_name_gives_one_safe_attachment_header(site: Site, name: str) -> None:
    web = site.web
    row = add_file(web, site.run_id, name, b"data", "text/plain")
    r = site.get(url(site.run_id, row.id), "alice")
    assert r.status_code == 200
    assert "set-cookie" not in r.headers
    value = r.headers["content-disposition"]
    assert value.isascii() and value.isprintable() and len(value) < 3000
    assert value.startswith('attachment; filename="')
    fallback = re.fullmatch(
        r"attachment; filename=\"([^\"\\\\]*)\"; filename\*=UTF-8''([A-Za-z0-9%._~-]+)", value
    )
    assert fallback is not None, value
    assert not set(fallback.group(1)) & set("%/;,=")
    # the only parameters are the two names, and the UTF-8 one is the stored name exactly
    (kind, _), (plain, ascii_name), (full, encoded) = disposition(value)
    assert (kind, plain, full, encoded[0]) == ("attachment", "filename", "filename", "UTF-8")
    exact = collapse_rfc2231_value(encoded)
    assert ascii_name == fallback.group(1) and exact == unquote(fallback.group(2)) == row.name
    assert "/" not in row.name and "\\" not in row.name and "\r" not in row.name and "\n" not in row.name


@pytest.mark.parametrize(
    "mime_type",
    ["text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "application/javascript", "text/css"],
)
def test_active_content_is_never_served_as_a_page(site: Site, mime_type: str) -> None:
    web = site.web
    row = add_file(web, site.run_id, "page.html", b"<script>alert(document.cookie)</script>", mime_type)
    r = site.get(url(site.run_id, row.id), "alice")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"].startswith("attachment;")
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = r.headers["content-security-policy"]
    assert "sandbox" in csp and "default-src 'none'" in csp
    assert r.headers["cross-origin-resource-policy"] == "same-origin"
    assert "no-store" in r.headers["cache-control"]


def test_the_run_page_links_each_file_with_its_name_escaped(site: Site) -> None:
    web = site.web
    evil = add_file(web, site.run_id, '<img src=x onerror=alert(1)>"x.html', b"<b>", "text/html")
    plain = add_file(web, site.run_id, "summary.txt", b"12345", "text/plain")
    site.login("bob")
    r = site.client.get(f"/runs/{site.run_id}")
    assert r.status_code == 200
    shown = rendered(r).context["files"]
    assert [f.url for f in shown] == [url(site.run_id, evil.id), url(site.run_id, plain.id)]
    assert "<img src=x" not in r.text and "&lt;img src=x onerror=alert(1)&gt;&#34;x.html" in r.text
    assert f'<a href="{url(site.run_id, plain.id)}" download>summary.txt</a>' in r.text
    assert "5 Bytes" in r.text
    # a run with no files has no Files section
    empty = add_run(web, "alice")
    page = site.client.get(f"/runs/{empty}")
    assert rendered(page).context["files"] == [] and 'id="files-title"' not in page.text


def test_a_large_file_streams_whole(site: Site) -> None:
    web = site.web
    data = secrets.token_bytes(3 * 1024 * 1024 + 17)
    row = add_file(web, site.run_id, "big.bin", data, "application/octet-stream")
    with site.client.stream(
        "GET", url(site.run_id, row.id), headers={"Authorization": f"Bearer {site.keys['alice']}"}
    ) as r:
        assert r.headers["content-length"] == str(len(data))
        chunks = list(r.iter_bytes())
    assert b"".join(chunks) == data


# Printable ASCII but " \\ % / ; , = in the quoted name; attr-chars and %XX in the other.
SAFE_HEADER = re.compile(
    r"attachment; filename=\"([ !#$&'()*+\-.0-9:<>?@A-Z\[\]^_`a-z{|}~]+)\"; "
    r"filename\*=UTF-8''([A-Za-z0-9%._~-]+)"
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=12_000), st.sampled_from(HOSTILE_NAMES)))
def test_the_header_is_safe_for_any_string_even_one_never_sanitized(name: str) -> None:
    """Rows written before names were cleaned, or by another path: the header holds alone."""
    value = content_disposition(name)
    assert value.isascii() and value.isprintable() and len(value) < 3000
    match = SAFE_HEADER.fullmatch(value)
    assert match is not None, value
    assert len(disposition(value)) == 3
    exact = unquote(match.group(2))
    assert exact and not any(ch in exact for ch in "/\\\r\n\x00")
