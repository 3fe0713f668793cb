"""The real Prometheus server (Debian's, which scripts/test installs) scrapes a real
`steamharness serve` on loopback with the metrics token, and what it stored after a call
and a failure is what the server counted: the target is up, and the runs' series carry
the project and status.

Prometheus is started on a free port with its own config and storage under the test's
folder, and stopped by its PID; every wait polls what it asserts, bounded by WAIT."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests import processes
from tests.e2e.server import LiveServer, free_port, running_server
from tests.e2e.test_mcp_tasks import Rpc
from tests.e2e.test_metrics import PROJECT, TOKEN, _project
from tests.helpers import WAIT
from tests.support.waiting import eventually


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise AssertionError(
            "Prometheus is not installed: this test scrapes the server with Debian's prometheus"
            " (apt-get install prometheus; scripts/test installs it)"
        )
    return found


@contextlib.contextmanager
def running_prometheus(root: Path, target: str) -> Iterator[str]:
    root.mkdir()
    (root / "token").write_text(TOKEN, encoding="utf-8")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "steamharness",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(root / "token")},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }
    (root / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    port = free_port()
    log = (root / "prometheus.log").open("ab")
    proc = processes.Popen(
        [
            prometheus_binary(),
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def query(api: str, expr: str) -> list[dict[str, Any]]:
    with contextlib.suppress(httpx2.HTTPError):
        r = httpx2.get(f"{api}/api/v1/query", params={"query": expr}, timeout=5)
        if r.status_code == 200:
            return r.json()["data"]["result"]
    return []


def until(api: str, expr: str, root: Path) -> list[dict[str, Any]]:
    try:
        return eventually(lambda: query(api, expr) or None, f"Prometheus has {expr!r}", interval=0.2)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}:\n{(root / 'prometheus.log').read_text(errors='replace')[-3000:]}"
        ) from None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("scraped")
    with running_server(base, STEAMHARNESS_METRICS_TOKEN=TOKEN) as live:
        live.add_project(_project(base / "metered"), PROJECT)
        yield live


def test_prometheus_scrapes_the_server_and_stores_what_it_counted(server: LiveServer, tmp_path: Path) -> None:
    key = server.create_key("scraped")
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=PROJECT, target="latest")
    assert rpc.result(rpc.call("ok"))["structuredContent"]["status"] == "success"
    assert rpc.result(rpc.call("boom"))["isError"] is True
    with running_prometheus(tmp_path / "prometheus", f"127.0.0.1:{server.port}") as api:
        [up] = until(api, 'up{job="steamharness"} == 1', tmp_path / "prometheus")
        assert up["metric"]["instance"] == f"127.0.0.1:{server.port}"
        ended = until(api, f'steamharness_runs_ended_total{{project="{PROJECT}"}}', tmp_path / "prometheus")
        assert {r["metric"]["status"]: float(r["value"][1]) for r in ended} == {"success": 1.0, "failed": 1.0}
        calls = until(
            api,
            'mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="boom"}',
            tmp_path / "prometheus",
        )
        assert [r["metric"]["error_type"] for r in calls] == ["tool_error"]
        # Without the token the same server refuses the scrape.
        assert httpx2.get(f"{server.base_url}/metrics", timeout=WAIT).status_code == 401
