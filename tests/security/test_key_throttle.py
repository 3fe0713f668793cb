"""A stranger sending bad keys cannot lock out valid ones. Against a real `steamharness
serve` with the default limit (30 failures per address): after 40 bad keys from
127.0.0.1, valid keys still work on the MCP endpoint and the JSON API, while bad keys
from there are refused with 429 until the failures age out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer
from tests.support import in_process_server
from webui.auth.throttle import AuthThrottle
from webui.settings import Settings

WAIT = 30.0
PV = "2025-11-25"
LIMIT = 30  # the default STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # Trusts no proxy: every request below comes from 127.0.0.1 as the server sees it.
    env = {"STEAMHARNESS_THROTTLE_HOLD_SECONDS": "0.05"}
    with in_process_server(tmp_path_factory.mktemp("key-throttle"), **env) as live:
        yield live
    assert "Traceback" not in live.log()


def initialize() -> dict[str, Any]:
    params = {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def mcp(client: httpx2.Client, server: LiveServer, key: str) -> httpx2.Response:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PV,
    }
    return client.post(server.mcp_url(HELLO), json=initialize(), headers=headers)


def api(client: httpx2.Client, server: LiveServer, key: str) -> httpx2.Response:
    return client.get(f"{server.base_url}/api/whoami", headers={"Authorization": f"Bearer {key}"})


def test_valid_keys_work_after_forty_bad_ones_from_the_same_address_and_bad_ones_stay_throttled(
    server: LiveServer,
) -> None:
    user_key = server.create_key("alice")
    statuses: list[int] = []
    with httpx2.Client(timeout=WAIT) as client:
        for n in range(40):
            bad = f"shk_{n:012d}_not-a-key"
            r = mcp(client, server, bad) if n % 2 else api(client, server, bad)
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1
        assert statuses == [401] * LIMIT + [429] * (40 - LIMIT)

        for key in (server.admin_key, user_key):
            opened = mcp(client, server, key)
            assert opened.status_code == 200, opened.text
            assert opened.headers.get("mcp-session-id")
            whoami = api(client, server, key)
            assert whoami.status_code == 200, whoami.text
        assert api(client, server, user_key).json()["data"]["actor"] == "user:alice"

        still_mcp = mcp(client, server, "shk_000000000000_still-bad")
        still_api = api(client, server, "shk_000000000000_still-bad")
        no_key = client.get(f"{server.base_url}/api/whoami")
    assert still_mcp.status_code == 429 and int(still_mcp.headers["retry-after"]) >= 1
    assert still_mcp.json()["error"]["message"].startswith("HTTP 429: too many failed credentials")
    assert still_api.status_code == 429 and still_api.json()["error"]["code"] == "throttled"
    assert no_key.status_code == 429  # a missing key is a failed credential too
    throttled = server.query("select details from audit_events where event = 'auth.throttled'")
    assert throttled and '"bearer"' in str(throttled[0]["details"])


def test_a_throttled_failure_is_not_counted_again_so_its_retry_after_holds() -> None:
    now = [1000.0]
    settings = Settings(bearer_failures_per_address=3, auth_failure_window_seconds=60.0)
    throttle = AuthThrottle.from_settings(settings, clock=lambda: now[0])
    assert [throttle.bearer_failed("a") for _ in range(3)] == [None, None, None]
    now[0] += 30
    assert throttle.bearer_failed("a") == 30  # throttled: refused with this wait
    now[0] += 29
    assert throttle.bearer_failed("a") == 1  # the earlier refusals did not push it back
    now[0] += 1
    assert throttle.bearer_failed("a") is None  # the first failures aged out: a 401 again
    assert throttle.bearer_failed("b") is None  # another address was never throttled
