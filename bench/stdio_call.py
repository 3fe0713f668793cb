"""Stdio tool-call latency: `steamharness mcp examples/hello` against a bare SDK stdio server.

Measures the wall time of `Client.call_tool("echo", {"text": ...})` as the Python SDK client
sees it, for both servers, in the same run and on the same client code path. The bare server
(bench/bare_stdio_server.py) runs the same handler in-process, so the ratio steamharness/bare
is the price of everything steamharness adds per call: argument validation, a persisted run,
a forked worker and its socket round trip. Target (the call-path issue): p50 at most 5x the bare server.

Each protocol era is measured with both servers connected at once: N warm-up calls each, then
N measured calls each in alternating blocks (ABBA order) so that drift on a noisy machine hits
both sides alike. `legacy` forces the 2025-11-25 handshake; `auto` (the client's default)
negotiates 2026-07-28.

Cold start: the wall time from spawning a server to the answer to its first `tools/list`
(process start, imports, project load, handshake), a fresh process each time, the two servers
alternating; medians of `--starts` spawns each and their ratio. Target: at most 1.5x the bare
server.

Run: `python bench/stdio_call.py [--calls N] [--modes legacy,auto] [--starts N]`
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import _common
import anyio
from mcp import Client, StdioServerParameters
from mcp.client.client import ConnectMode
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "examples" / "hello"
BARE_SERVER = Path(__file__).resolve().parent / "bare_stdio_server.py"
STEAMHARNESS = Path(sys.executable).parent / "steamharness"
TEXT = "benchmark payload"
MAX_CALLS = 5000
BLOCK = 25
P50_TARGET = 5.0
COLD_TARGET = 1.5
MAX_STARTS = 100


@dataclass
class Target:
    """One server under test and the latencies measured against it."""

    label: str
    params: StdioServerParameters
    check: Callable[[Any], bool]  # is this structured content the expected echo?
    client: Client | None = None
    samples: list[float] = field(default_factory=list)


def _hello_ok(sc: Any) -> bool:
    return isinstance(sc, dict) and sc.get("status") == "success" and sc.get("output") == {"text": TEXT}


def _bare_ok(sc: Any) -> bool:
    return sc == {"text": TEXT}


async def _call(target: Target) -> float:
    assert target.client is not None
    t0 = time.perf_counter()
    result = await target.client.call_tool("echo", {"text": TEXT})
    elapsed = time.perf_counter() - t0
    if result.is_error or not target.check(result.structured_content):
        raise RuntimeError(f"{target.label}: unexpected echo result: {result.model_dump(exclude_none=True)}")
    return elapsed


def _targets(data_dir: Path, mode: str) -> list[Target]:
    """The bare server and `steamharness mcp`, bare first; `mode` names the data dir."""
    # The SDK passes only a safe subset of the environment; PYTHONPATH is passed on so that a
    # snapshot of the code (e.g. `git archive HEAD`) put first on it is what both servers run.
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None
    return [
        Target(
            "bare SDK server",
            StdioServerParameters(command=sys.executable, args=[str(BARE_SERVER)], env=env, cwd=data_dir),
            _bare_ok,
        ),
        Target(
            "steamharness mcp",
            StdioServerParameters(
                command=str(STEAMHARNESS),
                args=["mcp", str(HELLO), "--data-dir", str(data_dir / mode)],
                env=env,
                # Not the checkout: the zygote runs `python -m`, so its cwd comes first on sys.path.
                cwd=data_dir,
            ),
            _hello_ok,
        ),
    ]


async def _cold_start(target: Target, errlog: TextIO) -> float:
    """Spawn `target`, connect, list its tools: the wall time to that answer. Then shut it down."""
    procs: _common.ProcMap = {}
    try:
        t0 = time.perf_counter()
        async with Client(stdio_client(target.params, errlog=errlog)) as client:
            tools = await client.list_tools()
            elapsed = time.perf_counter() - t0
            procs.update(_common.descendants())
        if not any(t.name == "echo" for t in tools.tools):
            raise RuntimeError(f"{target.label}: no echo tool in tools/list")
    finally:
        _common.report_leftovers(f"cold start of {target.label}", _common.stop_pids(procs))
    return elapsed


async def measure_cold_starts(starts: int, data_dir: Path, errlog: TextIO) -> list[Target]:
    """`starts` cold starts per server, alternating (ABBA) so drift hits both alike."""
    targets = _targets(data_dir, "cold")
    # One start each first, not measured: the page cache holds both servers' files afterwards,
    # and steamharness has created its data dir (a first run's one-time work).
    for t in targets:
        await _cold_start(t, errlog)
    order = targets
    for _ in range(starts):
        for t in order:
            t.samples.append(await _cold_start(t, errlog))
        order = order[::-1]
    return targets


def report_cold(targets: list[Target]) -> float:
    """Print the median cold start per server and the ratio; returns steamharness/bare."""
    bare, sh = targets
    print("\ncold start: spawn -> first tools/list answer")
    for t in targets:
        print(
            f"  {t.label:<18} median {_common.ms(statistics.median(t.samples))}   "
            f"min {_common.ms(min(t.samples))}   (n={len(t.samples)})"
        )
    r = statistics.median(sh.samples) / statistics.median(bare.samples)
    verdict = "met" if r <= COLD_TARGET else "NOT met"
    print(f"  ratio steamharness/bare   median {r:6.2f}x   (target <= {COLD_TARGET:g}x: {verdict})")
    return r


async def measure_mode(mode: ConnectMode, calls: int, data_dir: Path, errlog: TextIO) -> list[Target]:
    """Connect to both servers in `mode`, warm up, then time `calls` calls against each."""
    targets = _targets(data_dir, mode)
    procs: _common.ProcMap = {}
    try:
        async with AsyncExitStack() as stack:
            for t in targets:
                t.client = await stack.enter_async_context(
                    Client(stdio_client(t.params, errlog=errlog), mode=mode)
                )
                await t.client.list_tools()
            procs.update(_common.descendants())
            versions = ", ".join(
                f"{t.label}: {t.client.session.protocol_version}" for t in targets if t.client is not None
            )
            print(f"\nmode={mode}  (negotiated {versions})")
            for t in targets:  # warm-up: imports, caches, the zygote, SQLite pages
                for _ in range(calls):
                    await _call(t)
            procs.update(_common.descendants())
            done = 0
            order = targets
            while done < calls:
                n = min(BLOCK, calls - done)
                for t in order:
                    for _ in range(n):
                        t.samples.append(await _call(t))
                order = order[::-1]
                done += n
            procs.update(_common.descendants())
    finally:
        # The SDK closes each server's stdin and escalates to a kill; anything still alive
        # from the recorded PIDs (a worker, the zygote) is stopped here, by PID.
        _common.report_leftovers(f"mode={mode}", _common.stop_pids(procs))
    return targets


def report(targets: list[Target]) -> float:
    """Print p50/p99 per server and the ratios; returns the p50 ratio steamharness/bare."""
    bare, sh = targets
    for t in targets:
        p50, p99 = _common.percentile(t.samples, 50), _common.percentile(t.samples, 99)
        print(f"  {t.label:<18} p50 {_common.ms(p50)}   p99 {_common.ms(p99)}   (n={len(t.samples)})")
    r50 = _common.percentile(sh.samples, 50) / _common.percentile(bare.samples, 50)
    r99 = _common.percentile(sh.samples, 99) / _common.percentile(bare.samples, 99)
    verdict = "met" if r50 <= P50_TARGET else "NOT met"
    target = f"target p50 <= {P50_TARGET:g}x: {verdict}"
    print(f"  ratio steamharness/bare   p50 {r50:6.2f}x   p99 {r99:6.2f}x   ({target})")
    return r50


def _describe(exc: BaseException) -> str:
    """The leaf exceptions of a (nested) exception group, else the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--calls", type=int, default=500, help=f"warm-up and measured calls per server (<= {MAX_CALLS})"
    )
    parser.add_argument("--modes", default="legacy,auto", help="comma-separated client modes: legacy, auto")
    parser.add_argument(
        "--starts", type=int, default=9, help=f"measured cold starts per server (0 skips, <= {MAX_STARTS})"
    )
    args = parser.parse_args()
    calls = max(1, min(args.calls, MAX_CALLS))
    starts = max(0, min(args.starts, MAX_STARTS))
    modes: list[ConnectMode] = []
    for m in args.modes.split(","):
        if m not in ("legacy", "auto"):
            parser.error(f"unknown mode {m!r}")
        modes.append("legacy" if m == "legacy" else "auto")

    print(
        "stdio: cold start to the first tools/list, and tool-call latency (echo, Client.call_tool wall time)"
    )
    print(_common.machine_line())
    print(f"{calls} warm-up + {calls} measured calls per server and mode, blocks of {BLOCK} in ABBA order")
    data_dir = Path(tempfile.mkdtemp(prefix="shbench-stdio-"))
    errlog_path = data_dir / "servers-stderr.log"
    try:
        with errlog_path.open("w", encoding="utf-8") as errlog:
            if starts:
                report_cold(await measure_cold_starts(starts, data_dir, errlog))
            for mode in modes:
                try:
                    report(await measure_mode(mode, calls, data_dir, errlog))
                except Exception as exc:  # e.g. an era that does not work: report it, go on
                    print(f"  mode={mode} failed: {_describe(exc)}")
        stderr_text = errlog_path.read_text(encoding="utf-8", errors="replace").strip()
        if stderr_text:
            tail = "\n".join(stderr_text.splitlines()[-10:])
            print(f"\nservers wrote to stderr (last lines):\n{tail}", file=sys.stderr)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main)
