"""`/metrics` against clients and strangers: the labels a client controls (tool names,
methods, protocol versions, a client's error codes) stay bounded; the exposition is
reached only with the token (no path variant, method, near-miss token, other account's
key or cookie); a guessable token is refused at start (a throttled address's right token is
still answered: tests/security/test_metrics_attacks.py); a cancelled question leaves the
pending gauge.

Every wait is bounded by WAIT."""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import Rpc
from tests.helpers import WAIT
from tests.support import in_process_server
from webui.observability.metrics import DRAFT

PROJECT = "5d0c3e8a-7b51-4c52-9d7e-0b6f4a1e2c93"  # fixed: it names parametrized tests (xdist)
TOKEN = "metrics-" + uuid.uuid4().hex
OP = "mcp_server_operation_duration_seconds"

HANDLERS = """
def asks(ctx):
    return ctx.ask("Your name", [{"name": "name", "type": "string", "required": True}])


def ok(ctx):
    return "fine"
"""


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    manifest = {
        "id": PROJECT,
        "name": "obs-attack-metrics",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": n, "title": n.title(), "handler": f"h.py:{n}", "task": "never", "params": []}
            for n in ("asks", "ok")
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("obs-attack-metrics")
    with in_process_server(
        base,
        STEAMHARNESS_METRICS_TOKEN=TOKEN,
        STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS="1000",
    ) as live:
        live.add_project(_project(base / "p"), PROJECT)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("obs-attack")


def scrape(server: LiveServer) -> str:
    r = httpx2.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT)
    assert r.status_code == 200, r.text
    return r.text


def label_values(text: str, name: str, label: str) -> set[str]:
    return {
        s.labels[label]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(name) and label in s.labels
    }


# --------------------------------------------------------------------------- cardinality


def refusing_with(code: int) -> ElicitationFnT:
    """An elicitation callback that answers every request with an error of `code`."""

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ErrorData:
        return types.ErrorData(code=code, message="attacker-chosen code")

    return elicit


@pytest.mark.anyio
async def test_a_clients_elicitation_error_code_does_not_become_a_label(server: LiveServer, key: str) -> None:
    """A 2025 client answers the server's elicitation/create with a JSON-RPC error whose code
    it picks: no code a client picks becomes an `error_type` label (only the codes the
    server answers with are; see test_log_attacks.py for the refusal itself)."""
    codes = [-1_000_000 - i for i in range(5)]
    url = server.mcp_url(PROJECT, "draft")

    for code in codes:
        elicit = refusing_with(code)

        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=WAIT)
        ) as http:
            with anyio.fail_after(WAIT):
                async with Client(
                    streamable_http_client(url, http_client=http), mode="legacy", elicitation_callback=elicit
                ) as client:
                    with contextlib.suppress(MCPError):
                        await client.call_tool("asks", {})
    seen = label_values(scrape(server), OP, "error_type")
    leaked = {str(c) for c in codes} & seen
    assert not leaked, (
        f"client-chosen error codes became label values: {sorted(leaked)} (all: {sorted(seen)})"
    )


def test_made_up_methods_tools_and_protocol_versions_stay_bounded(server: LiveServer, key: str) -> None:
    """Refused: unknown methods, tool names and protocol versions all become `_other`."""
    marker = uuid.uuid4().hex
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    rpc.post("tools/call", {"name": f"tool-{marker}", "arguments": {}}, name=f"tool-{marker}")
    rpc.post(f"method/{marker}", {})
    # A stateful initialize with a made-up protocol version.
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": f"9999-{marker}",
            "capabilities": {},
            "clientInfo": {"name": f"c-{marker}", "version": "1"},
        },
    }
    httpx2.post(
        server.mcp_url(PROJECT, "draft"),
        json=body,
        headers={"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"},
        timeout=WAIT,
    )
    text = scrape(server)
    assert marker not in text


RENAMED = "8f3b2a61-4c0d-4e7f-a9b5-2d6c1e0f7a84"  # a project whose draft's tool is renamed


def test_a_drafts_renamed_tools_add_no_series(server: LiveServer, tmp_path: Path) -> None:
    """The draft's author renames its tool again and again and calls each name: no name
    becomes a label (every draft tool is `_draft`), so the series stay as many as before;
    the published version's tool keeps its name."""
    root = tmp_path / "renamed"
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")

    def manifest(tool: str) -> None:
        entry = {"id": tool, "title": "Ok", "handler": "h.py:ok", "task": "never", "params": []}
        doc = {"id": RENAMED, "name": "renamed", "version": "1.0.0", "projectType": "workflow"}
        (root / "package.json").write_text(json.dumps({**doc, "entrypoints": [entry]}), encoding="utf-8")

    manifest("published")
    server.add_project(root, RENAMED)
    key = server.create_key("renamer")  # granted every project, this one included
    published = Rpc(server, key, tasks=False, elicitation=False, project=RENAMED, target="latest")
    assert published.result(published.call("published"))["structuredContent"]["output"] == "fine"
    marker = uuid.uuid4().hex[:12]
    draft = Rpc(server, key, tasks=False, elicitation=False, project=RENAMED)
    series: list[int] = []
    text = ""
    for i in range(6):
        manifest(f"renamed-{marker}-{i}")
        done = draft.result(draft.call(f"renamed-{marker}-{i}"))
        assert done["structuredContent"]["output"] == "fine", done
        text = scrape(server)
        series.append(
            sum(
                1
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if (sample.name.startswith(OP) and sample.labels["gen_ai_tool_name"] not in ("", "_other"))
                or sample.labels.get("project") == RENAMED
            )
        )
    assert marker not in text
    assert DRAFT in label_values(text, OP, "gen_ai_tool_name")
    assert DRAFT in label_values(text, "steamharness_run_duration_seconds", "tool")
    assert "published" in label_values(text, "steamharness_run_duration_seconds", "tool")
    assert len(set(series[1:])) == 1, series  # after the first draft call, no rename adds a series


# --------------------------------------------------------------------------- reaching it


def _raw(server: LiveServer, head: str) -> str:
    port = int(server.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(head.encode("latin-1"))
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode("latin-1")


@pytest.mark.parametrize(
    "target",
    [
        "/metrics/",
        "//metrics",
        "/Metrics",
        "/metrics%2F",
        "/metrics;x",
        "/./metrics",
        "/static/../metrics",
        "/metrics?format=openmetrics",
        "/api/metrics",
        f"/api/workflows/{PROJECT}/mcp/../../../../metrics",
    ],
)
def test_path_variants_without_the_token_expose_nothing(server: LiveServer, target: str) -> None:
    raw = _raw(server, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert "steamharness_runs" not in raw and "mcp_server_operation" not in raw, raw[:300]


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "POST", "PUT"])
def test_other_methods_expose_nothing(server: LiveServer, method: str) -> None:
    raw = _raw(
        server,
        f"{method} /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    assert "steamharness_runs" not in raw and "mcp_server_operation" not in raw, raw[:300]


@pytest.mark.parametrize(
    "authorization",
    [
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN.upper()}",
        f"Basic {TOKEN}",
        f"Token {TOKEN}",
        f"Bearer\t{TOKEN}",
        f"{TOKEN}",
        f"Bearer {TOKEN}\x00",
        "Bearer " + "A" * 60000,
    ],
    ids=lambda a: f"near-miss-{len(a)}-{a[:6].strip()}",  # the token is random: ids must not be
)
def test_near_miss_tokens_are_refused(server: LiveServer, authorization: str) -> None:
    try:
        r = httpx2.get(f"{server.base_url}/metrics", headers={"Authorization": authorization}, timeout=WAIT)
    except (httpx2.HTTPError, ValueError):
        return  # the client or the server refused to send/parse it
    assert r.status_code in (400, 401, 413, 431, 429), (authorization[:40], r.status_code)
    assert "steamharness_runs" not in r.text


def test_another_accounts_key_and_a_cookie_are_no_token(server: LiveServer, key: str) -> None:
    for headers in (
        {"Authorization": f"Bearer {key}"},
        {"Cookie": f"steamharness_session={TOKEN}"},
        {"X-Metrics-Token": TOKEN},
    ):
        r = httpx2.get(f"{server.base_url}/metrics", headers=headers, timeout=WAIT)
        assert r.status_code == 401, (headers, r.status_code)


# --------------------------------------------------------------------------- gauges let go


def _gauge(text: str, name: str) -> float:
    return sum(
        s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name
    )


def test_a_cancelled_question_leaves_no_pending_gauge_or_age_behind(server: LiveServer, key: str) -> None:
    """The run's question is cancelled (the run ends while it waits): it leaves the pending
    count (its open question, time and span, is freed)."""
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    waiting = rpc.result(rpc.call("asks"))
    run_id = waiting["structuredContent"]["runId"]
    [row] = server.query("SELECT id FROM interactions WHERE run_id = :r", r=run_id)
    before = _gauge(scrape(server), "steamharness_questions_pending")
    assert before >= 1
    r = httpx2.post(
        f"{server.base_url}/api/interactions/{row['id']}/answer",
        json={"action": "cancel"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + WAIT
    while True:
        text = scrape(server)
        if _gauge(text, "steamharness_questions_pending") == before - 1:
            break
        assert time.monotonic() < deadline, "a cancelled question still counts as pending"
        time.sleep(0.05)


# --------------------------------------------------------------------------- the token itself


@pytest.mark.parametrize(
    "weak", ["a" * 24, "0" * 32, "metrics-token-metrics-token", "abcdefghijklmnopqrstuvwx"]
)
def test_a_trivially_guessable_long_token_is_refused(weak: str) -> None:
    """Long is not enough: one character repeated, a sequence, a phrase repeated."""
    from pydantic import ValidationError

    from webui.settings import Settings

    with pytest.raises(ValidationError, match="too weak"):
        Settings(metrics_token=SecretStr(weak))
