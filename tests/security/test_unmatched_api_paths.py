"""A stranger cannot map the JSON API: a request under /api that matches no route (an unknown
path, a known path with another method or a trailing slash) and carries no valid API key is
refused with 401 and the Bearer challenge, as a known route is, not answered 404, 405 or a
redirect that tells which paths exist; each such refusal counts as a failed key of the
client's address (429 + Retry-After past the limit). With a valid key the router answers as
usual (404, 405, the redirect)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from tests.web.conftest import Web, prepare, running

ADMIN_KEY = "shk-admin-unmatched-api-paths-0123456789"
LIMIT = 3
UNMATCHED = [
    ("GET", "/api/nothing"),
    ("POST", "/api/nothing"),
    ("GET", "/api/"),
    ("GET", "/api/workflows/hello/nothing"),
    ("DELETE", "/api/workflows/hello/nothing/deeper"),
    ("POST", "/api/whoami"),  # a known path, another method
    ("HEAD", "/api/whoami"),
    ("OPTIONS", "/api/whoami"),
    ("GET", "/api/whoami/"),  # a trailing slash the router would redirect
    ("GET", "/api/workflows/hello/mcp/"),
    ("PATCH", "/api/workflows/hello/configs"),  # a key-or-session resource, no such method
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    settings = prepare(tmp_path_factory.mktemp("unmatched") / "data")
    settings = settings.model_copy(
        update={"server_admin_key": SecretStr(ADMIN_KEY), "bearer_failures_per_address": 10_000}
    )
    with running(settings) as web:
        yield web


@pytest.mark.parametrize(("method", "path"), UNMATCHED)
@pytest.mark.parametrize("authorization", [None, "Bearer shk_000000000000_not-a-key"])
def test_an_unmatched_api_request_without_a_valid_key_is_refused_with_the_challenge(
    site: Web, method: str, path: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    r = site.client.request(method, path, headers=headers, follow_redirects=False)
    assert r.status_code == 401, (r.status_code, r.text)
    assert r.headers["www-authenticate"].startswith("Bearer ")
    assert "location" not in r.headers
    if method != "HEAD":
        assert r.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(("method", "path"), UNMATCHED)
def test_with_a_valid_key_the_router_answers_as_before(site: Web, method: str, path: str) -> None:
    r = site.client.request(
        method, path, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, follow_redirects=False
    )
    assert r.status_code in (404, 405, 307), (r.status_code, r.text)


def test_unmatched_api_requests_count_toward_the_key_throttle(tmp_path: Path) -> None:
    settings = prepare(tmp_path / "data")
    settings = settings.model_copy(
        update={
            "server_admin_key": SecretStr(ADMIN_KEY),
            "bearer_failures_per_address": LIMIT,
            "throttle_hold_seconds": 0.0,
        }
    )
    with running(settings) as web:
        statuses = [web.client.get(f"/api/probe-{n}").status_code for n in range(LIMIT + 2)]
        assert statuses[:LIMIT] == [401] * LIMIT, statuses
        assert statuses[LIMIT:] == [429, 429], statuses
        throttled = web.client.get("/api/whoami")  # a known route from the same address
        assert throttled.status_code == 429 and "retry-after" in throttled.headers
        # A valid key from there still works.
        ok = web.client.get("/api/whoami", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert ok.status_code == 200, ok.text
