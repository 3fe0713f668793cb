"""`/metrics` against strangers: a server with neither a metrics token nor an admin key
exposes nothing (404, whatever is sent); an account's own API key is no metrics token;
guessing the token is throttled like guessing an API key (429 with Retry-After for the bad
tokens of a throttled address, the right token still answered: strangers cannot lock out the
scrape); a weak token stops the server from starting."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx2
import pytest
from pydantic import SecretStr, ValidationError

from tests.e2e.server import LiveServer
from tests.helpers import WAIT
from tests.support import in_process_server
from webui.settings import Settings

TOKEN = "metrics-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("metrics-attacks")
    with in_process_server(
        base, STEAMHARNESS_METRICS_TOKEN=TOKEN, STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS="5"
    ) as live:
        yield live


def _get(server: LiveServer, authorization: str | None) -> httpx2.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    return httpx2.get(f"{server.base_url}/metrics", headers=headers, timeout=WAIT)


def test_a_server_without_a_token_or_admin_key_exposes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.mktemp("metrics-off")
    with in_process_server(base, STEAMHARNESS_SERVER_ADMIN_KEY="", STEAMHARNESS_METRICS_TOKEN="") as live:
        for authorization in (None, "Bearer", "Bearer x", f"Bearer {TOKEN}", "Bearer " + "a" * 8000):
            r = _get(live, authorization)
            assert r.status_code == 404, (authorization, r.status_code)
            assert "steamharness_" not in r.text and "mcp_server" not in r.text


def test_metrics_turned_off_expose_nothing_even_to_the_token(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.mktemp("metrics-disabled")
    with in_process_server(
        base, STEAMHARNESS_METRICS_TOKEN=TOKEN, STEAMHARNESS_METRICS_ENABLED="false"
    ) as live:
        for authorization in (f"Bearer {TOKEN}", f"Bearer {live.admin_key}"):
            r = _get(live, authorization)
            assert r.status_code == 404 and "STEAMHARNESS_METRICS_ENABLED" in r.text, r.text
            assert "steamharness_" not in r.text.replace("STEAMHARNESS_", "")


def test_a_wrong_metrics_token_is_audited(server: LiveServer) -> None:
    assert _get(server, "Bearer wrong-one").status_code in (401, 429)
    rows = server.query("SELECT event, outcome, details FROM audit_events WHERE event LIKE 'auth.%'")
    assert any("metrics" in str(r["details"]) and r["outcome"] in ("401", "429") for r in rows), rows


def test_an_accounts_api_key_is_no_metrics_token(server: LiveServer) -> None:
    key = server.create_key("not-an-operator")
    r = _get(server, f"Bearer {key}")
    assert r.status_code == 401 and "steamharness_" not in r.text


def test_strangers_bad_tokens_are_throttled_and_never_lock_out_the_scrape(server: LiveServer) -> None:
    """Bad tokens from the scraper's own address (a NAT, a proxy) until it is throttled: they
    are then refused with 429, while the token and the admin key are still answered, each
    scrape, and answering them lifts nothing for the strangers."""
    statuses = []
    while 429 not in statuses:
        statuses.append(_get(server, f"Bearer guess-{len(statuses)}").status_code)
        assert len(statuses) <= 6, statuses  # 5 failures per address here
    assert set(statuses[:-1]) == {401}, statuses
    for authorization in (f"Bearer {TOKEN}", f"Bearer {server.admin_key}", f"bearer {TOKEN}"):
        scrape = _get(server, authorization)
        assert scrape.status_code == 200, (scrape.status_code, scrape.text[:200])
        assert "steamharness_throttled_total" in scrape.text
        refused = _get(server, "Bearer guess-again")  # the address stays throttled for bad tokens
        assert refused.status_code == 429 and refused.headers["Retry-After"].isdigit()
        assert "steamharness_" not in refused.text
    assert _get(server, f"Bearer {TOKEN}x").status_code == 429  # the token with more: a bad one


@pytest.mark.parametrize(
    "weak", ["short", "changeme", "x" * 23, "a" * 24, "0" * 32, "abcdefghijklmnopqrstuvwx", "ab" * 16]
)
def test_a_weak_metrics_token_is_refused(weak: str) -> None:
    with pytest.raises(ValidationError, match="STEAMHARNESS_METRICS_TOKEN is too weak"):
        Settings(metrics_token=SecretStr(weak))
