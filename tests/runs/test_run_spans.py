"""The run's spans with the OpenTelemetry SDK's in-memory exporter: two parent runs on one
worker slot, each starting a child run whose question is answered. Every span is in the
caller's trace: each parent's run span under the caller's span, its child's under its
handler span, the child's worker start, handler and question under the child's run; the
second parent waited for the slot (its queue span), the first did not.

In a process of its own: a tracer provider is set once per process, and this test's must
not trace every other test of the worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import WAIT

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
from pathlib import Path

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from tests.helpers import next_update
from tests.runs.test_related import start_delegate
from webui.services import open_services
from webui.settings import Settings


async def main(base):
    settings = Settings(data_dir=base / "d", max_concurrent_runs=1, kill_grace_seconds=0.2)
    async with open_services(settings) as svc:
        with trace.get_tracer("caller").start_as_current_span("caller") as caller:
            parent = await start_delegate(svc, base / "p")
            second = await start_delegate(svc, base / "q")  # waits for the one slot
        statuses = []
        for run_id in (parent, second):
            waiting = await next_update(svc, run_id, ("waiting",))
            await svc.interactions.answer(
                waiting.interaction.id, action="accept", content={"greeting": "Hi"}, channel="test"
            )
            statuses.append((await next_update(svc, run_id)).status)
    spans = [
        {
            "name": s.name,
            "id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
            "trace": format(s.context.trace_id, "032x"),
            "attributes": dict(s.attributes or {}),
        }
        for s in exporter.get_finished_spans()
    ]
    caller_ids = {"id": format(caller.get_span_context().span_id, "016x"),
                  "trace": format(caller.get_span_context().trace_id, "032x")}
    runs = {"first": parent, "second": second}
    print(json.dumps({"statuses": statuses, "caller": caller_ids, "spans": spans, "runs": runs}))


anyio.run(main, Path(sys.argv[1]))
"""


def test_a_parent_and_its_child_run_are_one_trace_under_the_caller(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["statuses"] == ["success", "success"]
    spans = report["spans"]
    assert {s["trace"] for s in spans} == {report["caller"]["trace"]}
    by_id = {s["id"]: s for s in spans}
    runs = {s["attributes"]["steamharness.run.id"]: s for s in spans if s["name"] == "steamharness.run"}
    first, second = runs[report["runs"]["first"]], runs[report["runs"]["second"]]
    for parent in (first, second):
        assert parent["parent"] == report["caller"]["id"]
        assert parent["attributes"]["steamharness.run.status"] == "success"
        [child] = [
            s for s in runs.values() if s["parent"] in by_id and by_id[s["parent"]]["parent"] == parent["id"]
        ]
        assert by_id[child["parent"]]["name"] == "steamharness.handler"
        assert child["attributes"]["gen_ai.tool.name"] == "greet"
        under_child = {s["name"] for s in spans if s["parent"] == child["id"]}
        assert {"steamharness.worker.start", "steamharness.handler"} <= under_child
        [question] = [
            s
            for s in spans
            if s["name"] == "steamharness.question" and by_id[s["parent"]]["parent"] == child["id"]
        ]
        assert question["attributes"]["steamharness.question.outcome"] == "accept"
    # The second waited for the one slot; the first (and each child, lent its parent's) did not.
    assert "steamharness.queue" in {s["name"] for s in spans if s["parent"] == second["id"]}
    assert "steamharness.queue" not in {s["name"] for s in spans if s["parent"] == first["id"]}
    assert all("Ann" not in json.dumps(s["attributes"]) for s in spans)  # the params never
