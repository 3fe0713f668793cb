"""SIGTERM to a real `steamharness serve` while MCP calls are in flight: each client reads
a complete `shutting_down` tool result (not a broken stream), the process exits, and after
a restart the runs say they were stopped by the shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from tests.conftest import TORTURE as TORTURE_DIR
from tests.e2e.server import INTERACTIVE, TORTURE, LiveServer, running_server
from tests.e2e.test_http_mcp import sdk_client
from tests.helpers import WAIT, start_run, wait_until_gone
from tests.processes import ForkedProcess
from tests.security.test_limits import audit, payload
from webui.runs.types import RunRefused
from webui.services import open_services
from webui.settings import Settings
from webui.shutdown import SHUTTING_DOWN
from webui.store import runs as run_store
from webui.workflows.project import load_project

pytestmark = pytest.mark.anyio

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
EXIT_TIMEOUT = 30  # a bound on the wait, not a measured threshold
ServerProcess = subprocess.Popen[bytes] | ForkedProcess  # what LiveServer.proc holds


def sigterm(live: LiveServer) -> ServerProcess:
    assert live.proc is not None
    proc = live.proc
    os.kill(proc.pid, signal.SIGTERM)
    return proc


async def exited(proc: ServerProcess) -> int:
    return await anyio.to_thread.run_sync(lambda: proc.wait(timeout=EXIT_TIMEOUT))


async def stored_run(live: LiveServer, key: str, run_id: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(
        base_url=live.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
    ) as http:
        r = await http.get(f"/api/runs/{run_id}")
    assert r.status_code == 200, r.text
    return r.json()["data"]


def assert_stopped_by_shutdown(body: dict[str, Any]) -> None:
    assert body["status"] == "failed"
    assert body["error"]["code"] == "shutting_down"
    assert "shut down" in body["error"]["message"]


def shut_down_call(results: list[types.CallToolResult]) -> dict[str, Any]:
    """The one call's result: a complete tool error saying the server shut down; its payload."""
    (result,) = results
    body = payload(result)
    assert result.is_error is True
    assert_stopped_by_shutdown(body)
    return body


async def restart(live: LiveServer, proc: ServerProcess, gone: tuple[int, ...] = ()) -> None:
    """Once the SIGTERMed server has exited (and the `gone` processes with it), start it again."""
    with anyio.fail_after(TIMEOUT):
        assert await exited(proc) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        await wait_until_gone(list(gone))
    live.proc = None
    live.start()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with running_server(tmp_path) as server:
        yield server


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sigterm_ends_a_call_in_flight_with_a_shutting_down_result_and_records_its_run(
    live: LiveServer, mode: str
) -> None:
    key = live.create_key()
    pids: dict[str, int] = {}
    started = anyio.Event()
    results: list[types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if not (message or "").startswith("worker="):
            return  # a keep-alive (webui.mcp.keepalive), not the workflow's report
        pids.update({k: int(v) for k, v in (part.split("=") for part in (message or "").split())})
        started.set()

    proc: ServerProcess | None = None
    with anyio.fail_after(TIMEOUT):
        async with sdk_client(live.mcp_url(TORTURE), key, mode) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                results.append(
                    await client.call_tool("sleep", {"grandchild": True}, progress_callback=on_progress)
                )

            tg.start_soon(call)
            await started.wait()
            proc = sigterm(live)
    assert proc is not None
    body = shut_down_call(results)
    await restart(live, proc, gone=(pids["worker"], pids["grandchild"]))
    with anyio.fail_after(TIMEOUT):
        run = await stored_run(live, key, body["runId"])
    assert_stopped_by_shutdown(run)
    finished = [r for r in audit(live, "run.finished") if r["run_id"] == body["runId"]]
    assert [r["outcome"] for r in finished] == ["failed"]


async def test_sigterm_ends_runs_waiting_on_a_person_and_restart_reports_them_stopped(
    live: LiveServer,
) -> None:
    key = live.create_key()
    asked = anyio.Event()

    async def never_answers(
        ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    results: list[types.CallToolResult] = []
    proc: ServerProcess | None = None
    with anyio.fail_after(TIMEOUT):
        # One run waits with nobody on the line: its call already answered interaction_required.
        async with sdk_client(live.mcp_url(INTERACTIVE), key, "legacy") as plain:
            parked = payload(await plain.call_tool("plan_trip", {"traveller": "parked"}))
        assert parked["status"] == "waiting_for_input"
        # The other waits inside its call: the form was sent to the client, not answered.
        async with (
            sdk_client(live.mcp_url(INTERACTIVE), key, "legacy", never_answers) as client,
            anyio.create_task_group() as tg,
        ):

            async def call() -> None:
                results.append(await client.call_tool("plan_trip", {"traveller": "inline"}))
                tg.cancel_scope.cancel()  # the elicitation callback never returns by itself

            tg.start_soon(call)
            await asked.wait()
            proc = sigterm(live)
    assert proc is not None
    inline = shut_down_call(results)
    await restart(live, proc)
    with anyio.fail_after(TIMEOUT):
        for run_id in (inline["runId"], parked["runId"]):
            assert_stopped_by_shutdown(await stored_run(live, key, run_id))
        async with httpx2.AsyncClient(
            base_url=live.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
        ) as http:
            late = await http.post(
                f"/api/interactions/{parked['error']['interactionId']}/answer",
                json={"action": "accept", "content": {"destination": "x", "nights": 1}},
            )
    assert late.status_code == 410


async def test_once_shutdown_starts_queued_runs_are_stopped_too_and_no_new_run_starts(tmp_path: Path) -> None:
    torture = load_project(TORTURE_DIR)
    settings = Settings(data_dir=tmp_path / "d", max_concurrent_runs=1, kill_grace_seconds=0.5)
    async with open_services(settings) as services:
        runs = services.runs
        running = await start_run(services, torture, "sleep")
        queued = await start_run(services, torture, "sleep")
        with anyio.fail_after(TIMEOUT):
            await runs.stop_all(SHUTTING_DOWN, grace=0.5)
        for run_id in (running, queued):
            run = run_store.get_run(services.engine, run_id=run_id)
            assert run is not None and run.status == "failed"
            assert run.error == SHUTTING_DOWN
        with pytest.raises(RunRefused) as refused:
            await start_run(services, torture, "sleep")
        assert refused.value.code == "shutting_down"
