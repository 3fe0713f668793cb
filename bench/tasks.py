"""MCP tasks (the 2026-07-28 tasks extension) on a real `steamharness serve`, against
baselines measured in the same run, on loopback only. Stateless 2026-07-28 JSON-RPC POSTs
(httpx2, Bearer key), one client, the parts interleaved (ABAB) so the machine's drift hits
both sides alike:

- `poll`: one `tasks/get` of a task that ended (its run, its outcome and its files read back)
  and of a task waiting for its question under a handler's key (the pending questions and the
  key check), against `tools/list` on the same server (auth, binding, the catalog and
  JSON-RPC; no run read).
- `call`: a quick tool (its handler returns at once) called as a task (`"task": "required"`:
  the CreateTaskResult, then `tasks/get` until `completed`, polled back to back) against the
  same handler answered in the call by a client that does not declare tasks. The ratio is the
  whole cost of answering through a task for a call that did not need one.

Prints p50 / p99 and the p50 ratios. Run: `python bench/tasks.py [--samples N]` (~1 min).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common
import anyio
import httpx2
from http_call import Workspace, steamharness_server

PROJECT_ID = "0c6a4f8e-3d1b-4f0e-9a57-7b2d5c1e9f30"
MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
HANDLERS = """
def quick(ctx):
    return "ok"


def asks(ctx):
    return ctx.ask("Go on?", [{"name": "go", "type": "boolean"}], key="step")
"""
ENTRYPOINTS = [
    {"id": "quick", "handler": "h.py:quick", "task": "never", "params": []},
    {"id": "quick_task", "handler": "h.py:quick", "task": "required", "params": []},
    {"id": "asks", "handler": "h.py:asks", "task": "required", "params": []},
]


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True)
    package = {
        "id": PROJECT_ID,
        "name": "bench-tasks",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": ENTRYPOINTS,
    }
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (folder / "h.py").write_text(HANDLERS, encoding="utf-8")
    return folder


class Rpc:
    """Stateless 2026-07-28 requests of one client, declaring tasks or not."""

    def __init__(self, http: httpx2.Client, url: str, key: str, *, tasks: bool) -> None:
        self.http, self.url, self.key = http, url, key
        self.caps: dict[str, Any] = {"elicitation": {}, **({"extensions": {TASKS: {}}} if tasks else {})}
        self.next_id = 0

    def post(self, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench-tasks", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": self.caps,
        }
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        if name is not None:
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}
        r = self.http.post(self.url, json=body, headers=headers)
        message = _message(r)
        if "result" not in message:
            raise RuntimeError(f"{method}: {message}")
        return message["result"]

    def call(self, tool: str) -> dict[str, Any]:
        return self.post("tools/call", {"name": tool, "arguments": {}}, name=tool)

    def get(self, task_id: str) -> dict[str, Any]:
        return self.post("tasks/get", {"taskId": task_id}, name=task_id)


def _message(r: httpx2.Response) -> dict[str, Any]:
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    data = [
        json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]
    replies = [m for m in data if "id" in m and "method" not in m]
    if not replies:
        raise RuntimeError(f"no reply in {r.status_code} {r.text[:200]!r}")
    return replies[-1]


def until(rpc: Rpc, task_id: str, status: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (got := rpc.get(task_id))["status"] != status:
        if time.monotonic() > deadline:
            raise RuntimeError(f"task {task_id} still {got['status']}, not {status}")
        time.sleep(0.01)  # bounded by the deadline; set-up only, not measured
    return got


def interleaved(cases: list[tuple[str, Callable[[], object]]], samples: int) -> dict[str, list[float]]:
    """Each case once per round, the order rotating, after a tenth as warm-up."""
    times: dict[str, list[float]] = {label: [] for label, _ in cases}
    order = list(cases)
    for i in range(samples + samples // 10):
        for label, fn in order:
            t0 = time.perf_counter()
            fn()
            if i >= samples // 10:
                times[label].append(time.perf_counter() - t0)
        order = order[1:] + order[:1]
    return times


def report(title: str, times: dict[str, list[float]], baseline: str) -> None:
    print(f"\n[{title}]")
    base = statistics.median(times[baseline])
    for label, samples in times.items():
        p50, p99 = statistics.median(samples), _common.percentile(samples, 99)
        rel = "" if label == baseline else f"   p50 {_common.ratio(p50, base)} of {baseline}"
        print(f"  {label:<38} p50 {_common.ms(p50)}   p99 {_common.ms(p99)}{rel}")


async def main(samples: int) -> None:
    ws = Workspace.create()
    server = steamharness_server(ws)
    try:
        project = write_project(ws.root / "projects" / "bench-tasks")
        ws.cli("projects", "add", str(project))
        ws.cli("projects", "publish", PROJECT_ID)
        ws.cli("users", "grant", "bench", "--project", PROJECT_ID)
        key = ws.cli("keys", "create", "--user", "bench", "--project", PROJECT_ID).strip()
        await server.start()
        url = f"{server.base_url}/api/workflows/{PROJECT_ID}/mcp?target=latest"
        print(_common.machine_line())
        print(f"{samples} samples per case, one client, stateless {MODERN} POSTs over loopback")
        with httpx2.Client(timeout=30) as http:
            tasker, plain = Rpc(http, url, key, tasks=True), Rpc(http, url, key, tasks=False)
            ended = tasker.call("quick_task")["taskId"]
            until(tasker, ended, "completed")
            waiting = tasker.call("asks")["taskId"]
            until(tasker, waiting, "input_required")

            def as_task() -> None:
                task_id = tasker.call("quick_task")["taskId"]
                while tasker.get(task_id)["status"] != "completed":
                    pass  # polled back to back: the time to the result through a task

            polls = interleaved(
                [
                    ("tools/list", lambda: tasker.post("tools/list", {})),
                    ("tasks/get, ended", lambda: tasker.get(ended)),
                    ("tasks/get, waiting for its question", lambda: tasker.get(waiting)),
                ],
                samples,
            )
            report("poll", polls, "tools/list")
            calls = interleaved(
                [
                    ("call answered in the call", lambda: plain.call("quick")),
                    ("call as a task, to its result", as_task),
                ],
                max(samples // 3, 20),
            )
            report("call", calls, "call answered in the call")
            tasker.post("tasks/cancel", {"taskId": waiting}, name=waiting)
    finally:
        server.stop()
        shutil.rmtree(ws.root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300, help="per case (10..5000)")
    args = parser.parse_args()
    if not 10 <= args.samples <= 5000:
        parser.error("--samples must be 10..5000")
    anyio.run(main, args.samples)
