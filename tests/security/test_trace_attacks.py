"""OpenTelemetry tracing under hostile input: an argument or an answer quoted by a
validation message never reaches the exported spans; a client's "not sampled" flag does
not switch the server's traces off; malformed traceparent headers are ignored; a huge
tracestate and a huge tool name are bounded before export.

An OTLP/HTTP receiver on loopback records every span, its status message and its events.
Every wait is bounded by WAIT."""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.server import LiveServer, running_server
from tests.e2e.test_mcp_tasks import Rpc
from tests.helpers import WAIT
from tests.otlp_receiver import Receiver, running_receiver

PROJECT = str(uuid.uuid4())
SECRET = "s3cr3t-" + uuid.uuid4().hex

HANDLERS = """
def echo(ctx):
    return {"len": len(ctx.params["text"])}


def pin(ctx):
    return ctx.ask(
        "Your PIN",
        {"type": "object", "properties": {"pin": {"type": "string", "maxLength": 4}},
         "required": ["pin"]},
    )
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    manifest = {
        "id": PROJECT,
        "name": "obs-attack-traced",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {
                "id": "echo",
                "title": "Echo",
                "handler": "h.py:echo",
                "task": "never",
                "params": [{"name": "text", "type": "string", "required": True}],
            },
            {"id": "pin", "title": "Pin", "handler": "h.py:pin", "task": "never", "params": []},
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("obs-attack-traced")
    # A live server: tracing is set up per process from OTEL_* (one global tracer provider).
    with running_server(
        base,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_BSP_SCHEDULE_DELAY="50",
    ) as live:
        live.add_project(_project(base / "p"), PROJECT)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("obs-attack-tracer")


def _traceparent(flags: str = "01") -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"


# --------------------------------------------------------------------------- values in spans


def test_an_invalid_arguments_value_does_not_reach_the_exported_spans(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    """`Invalid arguments for tool 'echo': text: {'v': '<value>'} is not of type 'string'` is
    the tool error's message (it was an MCPError's, which the SDK's `tools/call` span took
    as its status description): the argument value is never exported, as the docs promise
    no arguments in the traces."""
    trace_id, header = _traceparent()
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    rpc.extra_meta = {"traceparent": header}
    answer = rpc.call("echo", {"text": {"v": SECRET}})
    assert answer["result"]["isError"] is True, answer
    assert SECRET in answer["result"]["structuredContent"]["error"]["message"]  # the caller's own value
    spans = receiver.of(trace_id, "tools/call echo")
    exported = json.dumps(spans)
    assert SECRET not in exported, spans["tools/call echo"]["status"]


def test_a_mistyped_answer_does_not_reach_the_exported_spans(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    """A person's answer that fails its form (`'<answer>' is too long`, a 4-digit PIN) is
    refused with an MCPError quoting it; the SDK span exports that as its status."""
    trace_id, header = _traceparent()
    rpc = Rpc(server, key, tasks=False, elicitation=True, project=PROJECT)
    rpc.extra_meta = {"traceparent": header}
    first = rpc.result(rpc.call("pin"))
    assert first.get("resultType") == "input_required", first
    [input_key] = list(first["inputRequests"])
    wrong = {input_key: {"action": "accept", "content": {"pin": SECRET}}}
    refused = rpc.call("pin", inputResponses=wrong, requestState=first["requestState"])
    assert "error" in refused, refused
    receiver.of(trace_id, "tools/call pin")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and SECRET not in receiver.everything():
        time.sleep(0.1)
    with receiver.lock:
        leaking = [
            (s["name"], s["status"], s["events"]) for s in receiver.spans.values() if SECRET in json.dumps(s)
        ]
    assert not leaking, leaking


# --------------------------------------------------------------------------- who decides


def test_a_client_cannot_switch_the_servers_tracing_off_for_its_runs(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    """A traceparent with the sampled flag off (`-00`): the default ParentBased sampler
    obeys the client, so the run records no span and keeps no trace ids: any client opts
    its runs out of the operator's traces."""
    _trace_id, header = _traceparent("00")
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    rpc.extra_meta = {"traceparent": header}
    result = rpc.result(rpc.call("echo", {"text": "x"}))
    run_id = result["structuredContent"]["runId"]
    got = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    )
    assert got.json()["data"]["trace"] is not None, "the client's unsampled flag turned the run's trace off"


# --------------------------------------------------------------------------- hostile headers


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # invalid all-zero trace id
        "00-" + "a" * 32 + "-" + "0" * 16 + "-01",  # invalid all-zero span id
        "ff-" + "a" * 32 + "-" + "b" * 16 + "-01",  # forbidden version
        "00-" + "A" * 32 + "-" + "B" * 16 + "-01",  # upper case
        "00-<script>alert(1)</script>-x-01",
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01-" + "x" * 30000,
        "\u00e9" * 100,
    ],
)
def test_a_malformed_traceparent_header_is_ignored(server: LiveServer, key: str, traceparent: str) -> None:
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    try:
        message = rpc.post(
            "tools/call",
            {"name": "echo", "arguments": {"text": "x"}},
            name="echo",
            traceparent=traceparent.encode("utf-8").decode("latin-1"),
        )
    except (httpx2.HTTPError, ValueError, AssertionError):
        return  # refused at the edge (header too large): fine
    result = rpc.result(message)
    run_id = result["structuredContent"]["runId"]
    got = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    ).json()["data"]
    trace = got["trace"]
    assert trace is None or (
        re.fullmatch(r"[0-9a-f]{32}", trace["traceId"]) and re.fullmatch(r"[0-9a-f]{16}", trace["spanId"])
    ), trace
    if trace is not None:
        assert trace["traceId"] not in ("0" * 32, "a" * 32), trace


def test_a_huge_tracestate_is_not_carried_into_exported_spans(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    trace_id, header = _traceparent()
    state = ",".join(f"k{i}=" + "v" * 250 for i in range(32))
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    rpc.result(
        rpc.post(
            "tools/call",
            {"name": "echo", "arguments": {"text": "x"}},
            name="echo",
            traceparent=header,
            tracestate=state,
        )
    )
    spans = receiver.of(trace_id, "steamharness.run")
    carried = max(len(s["trace_state"]) for s in spans.values())
    assert carried <= 512, f"{carried} bytes of client tracestate copied into every span"


def test_a_huge_tool_name_is_not_exported_whole(server: LiveServer, key: str, receiver: Receiver) -> None:
    """The SDK names its span `tools/call <name>`, sets gen_ai.tool.name to it and the
    status to `Unknown tool: <name>`, for a name the server does not know, whatever its
    size (bounded only by the request body limit). A 2025 stateful session (no Mcp-Name
    header to match)."""
    name = "n" * 200_000
    sid = _open_2025_session(server, key)
    trace_id, header = _traceparent()
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": {"traceparent": header}},
    }
    r = httpx2.post(server.mcp_url(PROJECT, "draft"), json=body, headers=_h2025(key, sid), timeout=WAIT)
    assert r.status_code in (200, 413), r.status_code
    deadline = time.monotonic() + 15
    mine: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with receiver.lock:
            mine = [s for s in receiver.spans.values() if s["trace"] == trace_id]
        if mine:
            break
        time.sleep(0.1)
    if not mine:
        return  # refused before any span
    biggest = max(len(json.dumps(s)) for s in mine)
    assert biggest < 20_000, f"a client's tool name made a {biggest:,}-character span"


def _h2025(key: str, sid: str | None = None) -> dict[str, str]:
    h = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if sid:
        h["Mcp-Session-Id"] = sid
        h["MCP-Protocol-Version"] = "2025-11-25"
    return h


def _open_2025_session(server: LiveServer, key: str) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "obs-attack", "version": "1"},
        },
    }
    r = httpx2.post(server.mcp_url(PROJECT, "draft"), json=body, headers=_h2025(key), timeout=WAIT)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    httpx2.post(server.mcp_url(PROJECT, "draft"), json=note, headers=_h2025(key, sid), timeout=WAIT)
    return sid
