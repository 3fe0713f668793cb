"""Exporting configurations with their secrets is a POST backed by CSRF, never a GET.

A GET can be sent by any page the browser opens (a link, an image, a prefetch) with the
person's cookie; so against a real `steamharness serve`: a GET asking for secrets is refused
(405, `secrets_export_needs_post`, `Allow: POST`) on the JSON API and on the page, whoever
asks; a browser session's POST without its CSRF token is refused (403, `csrf`); an API key
exports with secrets by POST; nothing secret is in any refusal. Exports without secrets stay
available by GET."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import LiveServer, make_server

NAME, PASSWORD = "cora", "config-export-pw-1"
SECRET = "export-secret-9d1c-value"
API = f"/api/workflows/{SETTINGS_PROJECT}/configs"
PAGE = f"/projects/{SETTINGS_PROJECT}/config"
CSRF_PREFIX = 'name="csrf_token" value="'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = make_server(tmp_path_factory.mktemp("config-export"))
    server.add_project(write_settings_project(server.projects / "settings"), SETTINGS_PROJECT)
    server.add_user(NAME, password=PASSWORD)
    server.grant(NAME, all_projects=True)
    with server.running():
        key = server.create_key(NAME, scopes=["configs"])
        with httpx2.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
            etag = api.get(f"{API}/default").headers["etag"]
            saved = api.patch(
                f"{API}/default", headers={"If-Match": etag}, json={"values": {"token": SECRET}}
            )
            assert saved.status_code == 200, saved.text
        server.env["TEST_KEY"] = key
        yield server


@pytest.fixture
def api(server: LiveServer) -> Iterator[httpx2.Client]:
    with httpx2.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {server.env['TEST_KEY']}"}, timeout=30
    ) as client:
        yield client


@pytest.fixture
def browser_session(server: LiveServer) -> Iterator[tuple[httpx2.Client, str]]:
    """A logged-in browser session and its CSRF token (the Origin a browser sends on writes)."""
    with httpx2.Client(base_url=server.base_url, timeout=30, headers={"Origin": server.base_url}) as http:
        form = http.get("/login")
        token = form.text.split(CSRF_PREFIX, 1)[1].split('"', 1)[0]
        r = http.post("/login", data={"username": NAME, "password": PASSWORD, "csrf_token": token})
        assert r.status_code == 303, r.text
        page = http.get(PAGE)
        assert page.status_code == 200
        yield http, page.text.split(CSRF_PREFIX, 1)[1].split('"', 1)[0]


def error(r: httpx2.Response) -> dict[str, Any]:
    return r.json()["error"]


def exports_with_secrets(server: LiveServer) -> int:
    rows = server.rows("audit_events")
    return sum(1 for r in rows if r["event"] == "config.exported" and r["details"]["with_secrets"] is True)


def test_a_get_asking_for_secrets_is_refused_on_the_api(server: LiveServer, api: httpx2.Client) -> None:
    before = exports_with_secrets(server)
    for value in ("true", "1", "yes"):
        r = api.get(f"{API}/export", params={"secrets": value})
        assert r.status_code == 405, r.text
        assert r.headers["allow"] == "POST"
        assert error(r)["code"] == "secrets_export_needs_post"
        assert "POST" in error(r)["message"] and SECRET not in r.text
    plain = api.get(f"{API}/export")
    assert plain.status_code == 200 and SECRET not in plain.text and plain.json()["secretsIncluded"] is False
    assert exports_with_secrets(server) == before


def test_an_api_key_exports_secrets_by_post(server: LiveServer, api: httpx2.Client) -> None:
    before = exports_with_secrets(server)
    r = api.post(f"{API}/export", params={"secrets": "true"})
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    assert r.json()["secretsIncluded"] is True and SECRET in r.text
    masked = api.post(f"{API}/export")
    assert masked.status_code == 200 and SECRET not in masked.text
    assert exports_with_secrets(server) == before + 1


def test_a_browser_session_needs_its_csrf_token_to_export_secrets(
    server: LiveServer, browser_session: tuple[httpx2.Client, str]
) -> None:
    http, csrf = browser_session
    before = exports_with_secrets(server)
    # The JSON API with the cookie: a GET is refused, a POST without the token too.
    r = http.get(f"{API}/export", params={"secrets": "true"})
    assert r.status_code == 405 and error(r)["code"] == "secrets_export_needs_post" and SECRET not in r.text
    r = http.post(f"{API}/export", params={"secrets": "true"})
    assert r.status_code == 403 and error(r)["code"] == "csrf" and SECRET not in r.text
    r = http.post(f"{API}/export", params={"secrets": "true"}, headers={"X-CSRF-Token": "forged"})
    assert r.status_code == 403 and SECRET not in r.text
    # The page: the old GET link is refused, a form POST without (or with a wrong) token too.
    r = http.get(f"{PAGE}/export", params={"secrets": "on"})
    assert r.status_code == 405 and r.headers["allow"] == "POST" and SECRET not in r.text
    r = http.post(f"{PAGE}/export", data={"secrets": "on"})
    assert r.status_code == 403 and SECRET not in r.text
    r = http.post(f"{PAGE}/export", data={"secrets": "on", "csrf_token": "forged"})
    assert r.status_code == 403 and SECRET not in r.text
    assert exports_with_secrets(server) == before
    # With the token, both export the secret.
    r = http.post(f"{API}/export", params={"secrets": "true"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and SECRET in r.text
    r = http.post(f"{PAGE}/export", data={"secrets": "on", "csrf_token": csrf})
    assert r.status_code == 200 and SECRET in r.text
    assert r.headers["content-disposition"].startswith("attachment;")
    assert exports_with_secrets(server) == before + 2
    # Without secrets, the page still downloads by GET (a link is harmless).
    r = http.get(f"{PAGE}/export")
    assert r.status_code == 200 and SECRET not in r.text
