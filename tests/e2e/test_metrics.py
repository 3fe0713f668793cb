"""`/metrics` of a real `steamharness serve`: who may scrape it, and that a call, a failure
and a waiting question move the right series (parsed with prometheus-client's own parser);
labels stay bounded whatever a client sends; `promtool check metrics` finds nothing to say
about the exposition (Debian's prometheus, which scripts/test installs).

Every wait polls what it asserts, bounded by WAIT."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.server import LiveServer, running_server
from tests.e2e.test_mcp_tasks import Rpc
from tests.helpers import WAIT
from tests.support.waiting import eventually

PROJECT = str(uuid.uuid4())
TOKEN = "metrics-" + uuid.uuid4().hex  # generated per run: no secret in the repo

HANDLERS = """
def ok(ctx):
    return "fine"


def boom(ctx):
    raise ValueError("no")


def asks(ctx):
    return ctx.ask("Your name", [{"name": "name", "type": "string", "required": True}])
"""


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    entry = {"task": "never", "params": []}
    manifest = {
        "id": PROJECT,
        "name": "metered",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": name, "title": name.title(), "handler": f"h.py:{name}", **entry}
            for name in ("ok", "boom", "asks")
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("metrics")
    with running_server(base, STEAMHARNESS_METRICS_TOKEN=TOKEN) as live:
        live.add_project(_project(base / "metered"), PROJECT)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("metered")


def scrape(server: LiveServer, token: str = TOKEN) -> str:
    r = httpx2.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=WAIT)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")
    return r.text


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
    ]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    return sum(v for n, got, v in samples(text) if n == name and labels.items() <= got.items())


def until(server: LiveServer, name: str, at_least: float, **labels: str) -> str:
    def polled() -> str | None:
        text = scrape(server)
        return text if value(text, name, **labels) >= at_least else None

    return eventually(polled, f"{name}{labels} at least {at_least}")


def test_only_a_scraper_with_the_token_or_the_admin_key_reads_them(server: LiveServer) -> None:
    url = f"{server.base_url}/metrics"
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ):
        r = httpx2.get(url, headers=headers, timeout=WAIT)
        assert r.status_code == 401, (headers, r.status_code)
        assert "steamharness" not in r.text
    scrape(server)
    scrape(server, server.admin_key)


def test_a_call_a_failure_and_a_waiting_question_move_their_series(server: LiveServer, key: str) -> None:
    before = scrape(server)
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT, target="latest")
    assert rpc.result(rpc.call("ok"))["structuredContent"]["output"] == "fine"
    failed = rpc.result(rpc.call("boom"))
    assert failed["isError"] is True
    waiting = rpc.result(rpc.call("asks"))
    assert waiting["structuredContent"]["status"] == "waiting_for_input", waiting

    op = "mcp_server_operation_duration_seconds_count"
    after = until(server, "steamharness_questions_pending", 1)
    for tool, error in (("ok", ""), ("boom", "tool_error")):
        labels = {"mcp_method_name": "tools/call", "gen_ai_tool_name": tool, "error_type": error}
        assert value(after, op, **labels) == value(before, op, **labels) + 1, (tool, error)
    for status in ("success", "failed"):
        name = "steamharness_runs_ended_total"
        assert (
            value(after, name, project=PROJECT, status=status)
            == value(before, name, project=PROJECT, status=status) + 1
        )
    durations = "steamharness_run_duration_seconds_count"
    assert value(after, durations, project=PROJECT, tool="boom", status="failed") >= 1
    assert value(after, "steamharness_runs_started_total", project=PROJECT) >= 3
    assert value(after, "steamharness_runs_waiting", **{"for": "input"}) >= 1
    assert value(after, "steamharness_questions_asked_total", kind="form") >= 1
    assert value(after, "steamharness_questions_oldest_age_seconds") > 0
    assert value(after, "steamharness_worker_slots", state="idle") >= 1

    # The question answered through the API: it leaves the gauge, and its wait is observed.
    [row] = server.query(
        "SELECT i.id FROM interactions i JOIN runs r ON r.id = i.run_id"
        " WHERE r.project_id = :p AND i.status = 'pending'",
        p=PROJECT,
    )
    r = httpx2.post(
        f"{server.base_url}/api/interactions/{row['id']}/answer",
        json={"action": "accept", "content": {"name": "Ada"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text
    done = until(server, "steamharness_question_wait_seconds_count", 1, kind="form")
    assert (
        value(done, "steamharness_questions_answered_total", kind="form", action="accept", channel="api") >= 1
    )
    until(
        server,
        "steamharness_runs_ended_total",
        value(before, "steamharness_runs_ended_total", project=PROJECT, status="success") + 2,
        project=PROJECT,
        status="success",
    )


def test_labels_stay_bounded_whatever_a_client_sends(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False, project=PROJECT, target="latest")
    made_up = f"no-such-tool-{uuid.uuid4().hex}"
    assert "error" in rpc.call(made_up) or rpc.result(rpc.call(made_up)).get("isError")
    rpc.post(f"made/up/{uuid.uuid4().hex}", {})
    text = scrape(server)
    assert made_up not in text and "made/up" not in text
    assert value(text, "mcp_server_operation_duration_seconds_count", gen_ai_tool_name="_other") >= 1
    assert value(text, "mcp_server_operation_duration_seconds_count", mcp_method_name="_other") >= 1


def test_failed_credentials_are_counted(server: LiveServer) -> None:
    before = value(scrape(server), "steamharness_auth_failures_total", kind="bearer")
    r = httpx2.get(
        f"{server.base_url}/api/projects", headers={"Authorization": "Bearer shk_nope_nope"}, timeout=WAIT
    )
    assert r.status_code == 401
    assert value(scrape(server), "steamharness_auth_failures_total", kind="bearer") >= before + 1


def test_promtool_finds_nothing_to_say_about_the_exposition(server: LiveServer) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: apt-get install prometheus (scripts/test installs it)"
    done = subprocess.run(
        [promtool, "check", "metrics"], input=scrape(server), capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        done.stdout,
        done.stderr,
    )
