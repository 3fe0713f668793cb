"""Worker dispatch latency: `WorkerPool.spawn()` against a cold interpreter start.

Dispatch is the time from calling `pool.spawn(spec)` until it returns, i.e. until the
zygote has forked a child and the child's `hello` has been accepted on the run socket. Each
spawn runs the examples/hello `echo` handler and is drained to completion (`done`, socket
closed, exit reported) before the next one, as the run service does. Target: p50 <= 5 ms.

The baseline is what dispatch would cost without the fork server: a cold `python` that
imports the stack (`import webui.mcp.stdio`) and prints a ready line, timed from the spawn
call until that line is read. A second reference imports only the child runtime
(`webui.runs.child`, what the zygote preloads): the cheapest cold start that could run a
handler. Dispatches and cold starts are interleaved in rounds so machine noise hits both.

Run: `python bench/dispatch.py [--spawns N] [--cold N]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common

from webui.runs.pool import WorkerPool

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "examples" / "hello"
TEXT = "benchmark payload"
MAX_SPAWNS = 5000
MAX_COLD = 200
WARMUP_SPAWNS = 10
ROUNDS = 10
DISPATCH_P50_TARGET = 0.005
EXIT_WAIT = 5.0


@dataclass
class Series:
    label: str
    samples: list[float] = field(default_factory=list)


def echo_spec(create_dir: Path) -> dict[str, Any]:
    """A run spec for the hello `echo` entrypoint, shaped as the run service builds it."""
    return {
        "runId": f"bench-{uuid.uuid4().hex[:12]}",
        "entrypointId": "echo",
        "params": {"text": TEXT},
        "root": str(HELLO),
        "handler": "main.py:echo",
        "fileCreateDir": str(create_dir),
        "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        "related": {},
    }


async def one_dispatch(pool: WorkerPool, create_dir: Path) -> tuple[float, float]:
    """Spawn one echo run and drain it; returns (dispatch, spawn-to-outcome) seconds."""
    spec = echo_spec(create_dir)
    t0 = time.perf_counter()
    worker = await pool.spawn(spec)
    t_dispatch = time.perf_counter() - t0
    outcome: dict[str, Any] | None = None
    t_outcome = 0.0
    try:
        while (msg := await worker.recv()) is not None:
            if msg.get("type") in ("done", "failed", "error"):
                outcome, t_outcome = msg, time.perf_counter() - t0
        status = await worker.wait_exit(EXIT_WAIT)
    finally:
        worker.close()
    if outcome != {"type": "done", "output": {"text": TEXT}}:
        raise RuntimeError(f"echo run {spec['runId']} ended with {outcome!r}")
    if status is None or status.code != 0:
        worker.kill()
        raise RuntimeError(f"echo run {spec['runId']}: worker {worker.pid} exit {status!r}")
    return t_dispatch, t_outcome


async def one_cold(code: str) -> float:
    """Start `python -c code`, time until it prints its ready line, then let it exit (by PID if need be)."""
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        elapsed = time.perf_counter() - t0
        if line.strip() != b"ready":
            raise RuntimeError(f"cold start printed {line!r}")
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), EXIT_WAIT)
    finally:
        if proc.returncode is None:
            proc.kill()  # by its PID (asyncio's Process.kill signals proc.pid)
            await proc.wait()
    return elapsed


COLD_STACK = "import webui.mcp.stdio, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
COLD_CHILD = (
    "import webui.runs.child, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
)


def show(series: Series) -> tuple[float, float]:
    p50, p99 = _common.percentile(series.samples, 50), _common.percentile(series.samples, 99)
    print(f"  {series.label:<45} p50 {_common.ms(p50)}   p99 {_common.ms(p99)}   (n={len(series.samples)})")
    return p50, p99


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--spawns", type=int, default=200, help=f"measured dispatches ({ROUNDS}..{MAX_SPAWNS})"
    )
    parser.add_argument(
        "--cold", type=int, default=20, help=f"cold starts per reference ({ROUNDS}..{MAX_COLD})"
    )
    parser.add_argument(
        "--worker-user",
        default="",
        help="as root: drop each worker to this user, as a root server does (its default: nobody)",
    )
    args = parser.parse_args()
    spawns = max(ROUNDS, min(args.spawns, MAX_SPAWNS))
    cold = max(ROUNDS, min(args.cold, MAX_COLD))

    print("worker dispatch latency: pool.spawn(spec) until the child's hello is accepted")
    print(_common.machine_line())
    print(
        f"{spawns} dispatches (after {WARMUP_SPAWNS} warm-up) and {cold} cold starts each, in {ROUNDS} rounds"
    )

    dispatch = Series("dispatch: pool.spawn() -> hello accepted")
    run_total = Series("  (spawn -> outcome received, whole echo run)")
    stack = Series("cold python + import webui.mcp.stdio")
    child_only = Series("cold python + import webui.runs.child")

    create_dir = Path(tempfile.mkdtemp(prefix="shbench-dispatch-"))
    # Work from a neutral directory: `python -m webui.runs.zygote` and `python -c` put the cwd
    # first on sys.path, so started from the checkout they would ignore a PYTHONPATH snapshot.
    old_cwd = os.getcwd()
    os.chdir(create_dir)
    if args.worker_user:
        from webui.runs.isolation import worker_user

        pool = WorkerPool(user=worker_user(args.worker_user))
        print(f"workers drop to {args.worker_user!r}")
    else:
        pool = WorkerPool()
    procs: _common.ProcMap = {}
    try:
        t0 = time.perf_counter()
        await pool.start()
        print(f"pool.start() (zygote up): {_common.ms(time.perf_counter() - t0).strip()}")
        procs.update(_common.descendants())
        for _ in range(WARMUP_SPAWNS):
            await one_dispatch(pool, create_dir)
        for r in range(ROUNDS):
            for _ in range(spawns // ROUNDS + (1 if r < spawns % ROUNDS else 0)):
                d, total = await one_dispatch(pool, create_dir)
                dispatch.samples.append(d)
                run_total.samples.append(total)
            for _ in range(cold // ROUNDS + (1 if r < cold % ROUNDS else 0)):
                stack.samples.append(await one_cold(COLD_STACK))
                child_only.samples.append(await one_cold(COLD_CHILD))
            procs.update(_common.descendants())
        if pool.live_pids():
            print(f"note: pool still tracks live workers after draining: {sorted(pool.live_pids())}")
    finally:
        await pool.close()
        _common.report_leftovers("dispatch", _common.stop_pids(procs))
        os.chdir(old_cwd)
        shutil.rmtree(create_dir, ignore_errors=True)

    print()
    d50, d99 = show(dispatch)
    show(run_total)
    s50, s99 = show(stack)
    c50, c99 = show(child_only)
    for label, b50, b99 in (("cold stack import", s50, s99), ("cold child-runtime import", c50, c99)):
        r50, r99 = _common.ratio(d50, b50), _common.ratio(d99, b99)
        print(f"  ratio dispatch / {label:<26} p50 {r50}   p99 {r99}")
    verdict = "met" if d50 <= DISPATCH_P50_TARGET else "NOT met"
    print(f"  target dispatch p50 <= {DISPATCH_P50_TARGET * 1000:g} ms: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
