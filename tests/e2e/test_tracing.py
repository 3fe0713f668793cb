"""OpenTelemetry traces of a real `steamharness serve`, exported over OTLP/HTTP (the
standard `OTEL_*` variables) to a receiver in this test on loopback: the client's trace
continues from the request's `_meta` traceparent (or the `traceparent` header) through the
SDK's `tools/call` span into the run's spans (preflight, run, worker start, handler, its
question, the queue when the run waits for a slot); the ids are on the run (API and page)
and in the audit; no argument reaches an attribute; a server without the variables exports
nothing and records no ids.

Every wait polls what it asserts, bounded by WAIT."""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.e2e.server import LiveServer, running_server
from tests.e2e.test_mcp_tasks import Rpc
from tests.helpers import WAIT
from tests.otlp_receiver import Receiver, running_receiver
from tests.related_projects import HELPER, MAIN, write_projects

PROJECT = str(uuid.uuid4())
SECRET_ARGUMENT = "argument-" + uuid.uuid4().hex

HANDLERS = """
def echo(ctx):
    return {"len": len(ctx.params["text"])}


def asks(ctx):
    return ctx.ask("Name?", [{"name": "name", "type": "string", "required": True}])
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
        "name": "traced",
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
            {"id": "asks", "title": "Asks", "handler": "h.py:asks", "task": "never", "params": []},
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("traced")
    with running_server(
        base,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="steamharness-under-test",
        OTEL_BSP_SCHEDULE_DELAY="50",
    ) as live:
        live.add_project(_project(base / "traced"), PROJECT)
        related = write_projects(base / "related", main_related=[{"alias": "helper", "id": HELPER}])
        live.register(related["helper"])
        live.register(related["main"])
        live.publish(HELPER)
        live.publish(MAIN)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("traced")


def _traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, parent, f"00-{trace_id}-{parent}-01"


def test_a_calls_trace_continues_from_its_meta_into_the_runs_spans(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    trace_id, parent, header = _traceparent()
    rpc = Rpc(server, key, tasks=False, project=PROJECT)
    rpc.extra_meta = {"traceparent": header}
    result = rpc.result(rpc.call("echo", {"text": SECRET_ARGUMENT}))
    assert result["structuredContent"]["status"] == "success"
    run_id = result["structuredContent"]["runId"]
    spans = receiver.until(
        trace_id,
        "tools/call echo",
        "steamharness.preflight",
        "steamharness.run",
        "steamharness.worker.start",
        "steamharness.handler",
    )
    call, run = spans["tools/call echo"], spans["steamharness.run"]
    assert call["parent"] == parent  # the client's span
    assert spans["steamharness.preflight"]["parent"] == call["id"]
    assert run["parent"] == call["id"]
    # (`steamharness.queue` only when the run waited for a worker slot: this one took a free one)
    for name in ("steamharness.worker.start", "steamharness.handler"):
        assert spans[name]["parent"] == run["id"], name
    assert run["attributes"]["steamharness.run.id"] == run_id
    assert run["attributes"]["gen_ai.tool.name"] == "echo"
    assert run["attributes"]["steamharness.run.status"] == "success"
    assert run["service"] == "steamharness-under-test"
    # No argument in any attribute.
    assert all(SECRET_ARGUMENT not in json.dumps(s["attributes"]) for s in spans.values())

    # The ids are the run's: in the API, on the page, in the audit.
    got = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    )
    assert got.json()["data"]["trace"] == {"traceId": trace_id, "spanId": run["id"]}
    password = "traced-password-" + uuid.uuid4().hex[:8]
    server.add_user("tracer", password=password)
    server.grant("tracer", all_projects=True)
    with httpx2.Client(base_url=server.base_url, timeout=WAIT, headers={"Origin": server.base_url}) as web:
        token = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/login").text)
        assert token
        login = web.post(
            "/login", data={"username": "tracer", "password": password, "csrf_token": token.group(1)}
        )
        assert login.status_code == 303, login.text
        page = web.get(f"/runs/{run_id}")
    assert page.status_code == 200 and f"<code>{trace_id}</code>" in page.text
    assert f"<code>{run['id']}</code>" in page.text
    [audit] = server.query(
        "SELECT details FROM audit_events WHERE run_id = :r AND event = 'run.created'", r=run_id
    )
    details = json.loads(audit["details"]) if isinstance(audit["details"], str) else audit["details"]
    # The call that started the run is in the same row (one audit row per fact).
    assert details == {"traceId": trace_id, "spanId": run["id"], "call": "tools/call"}


def test_a_traceparent_header_continues_too_and_a_question_has_its_span(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    trace_id, parent, header = _traceparent()
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT)
    waiting = rpc.result(
        rpc.post("tools/call", {"name": "asks", "arguments": {}}, name="asks", traceparent=header)
    )
    run_id = waiting["structuredContent"]["runId"]
    [row] = server.query("SELECT id FROM interactions WHERE run_id = :r", r=run_id)
    answered = httpx2.post(
        f"{server.base_url}/api/interactions/{row['id']}/answer",
        json={"action": "accept", "content": {"name": "Ada"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert answered.status_code == 200, answered.text
    spans = receiver.until(
        trace_id, "tools/call asks", "steamharness.run", "steamharness.handler", "steamharness.question"
    )
    assert spans["tools/call asks"]["parent"] == parent
    question = spans["steamharness.question"]
    assert question["parent"] == spans["steamharness.handler"]["id"]
    assert question["attributes"]["steamharness.question.kind"] == "form"
    assert question["attributes"]["steamharness.question.outcome"] == "accept"
    assert "Ada" not in json.dumps(question["attributes"])


def test_without_the_variables_nothing_is_exported_and_no_ids_are_kept(
    tmp_path: Path, receiver: Receiver
) -> None:
    with running_server(tmp_path / "untraced") as live:
        live.add_project(_project(tmp_path / "p"), PROJECT)
        key = live.create_key("untraced")
        trace_id, _parent, header = _traceparent()
        rpc = Rpc(live, key, tasks=False, project=PROJECT)
        rpc.extra_meta = {"traceparent": header}
        result = rpc.result(rpc.call("echo", {"text": "x"}))
        run_id = result["structuredContent"]["runId"]
        got = httpx2.get(
            f"{live.base_url}/api/runs/{run_id}", headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
        )
        assert got.json()["data"]["trace"] is None
    with receiver.lock:
        assert not [s for s in receiver.spans.values() if s["trace"] == trace_id]


def test_a_child_runs_span_is_under_the_handler_that_started_it(
    server: LiveServer, key: str, receiver: Receiver
) -> None:
    trace_id, _parent, header = _traceparent()
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=MAIN)
    rpc.extra_meta = {"traceparent": header}
    waiting = rpc.result(rpc.call("delegate", {"name": "Bo"}))
    assert waiting["structuredContent"]["status"] == "waiting_for_input", waiting
    [row] = server.query(
        "SELECT id FROM interactions WHERE status = 'pending' AND title = 'Confirm the greeting'"
    )
    answered = httpx2.post(
        f"{server.base_url}/api/interactions/{row['id']}/answer",
        json={"action": "accept", "content": {"greeting": "Hola"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert answered.status_code == 200, answered.text
    deadline = time.monotonic() + WAIT
    while True:
        with receiver.lock:
            mine = [{**v, "id": k} for k, v in receiver.spans.items() if v["trace"] == trace_id]
        runs = [s for s in mine if s["name"] == "steamharness.run"]
        if len(runs) == 2 and all("steamharness.run.status" in r["attributes"] for r in runs):
            break
        assert time.monotonic() < deadline, sorted(s["name"] for s in mine)
        time.sleep(0.05)
    by_id = {s["id"]: s for s in mine}
    child = next(r for r in runs if r["attributes"]["gen_ai.tool.name"] == "greet")
    parent = next(r for r in runs if r["attributes"]["gen_ai.tool.name"] == "delegate")
    handler = by_id[child["parent"]]
    assert handler["name"] == "steamharness.handler" and handler["parent"] == parent["id"]
    questions = [s for s in mine if s["name"] == "steamharness.question"]
    assert [by_id[q["parent"]]["parent"] for q in questions] == [child["id"]]
