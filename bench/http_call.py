"""Streamable HTTP: tool calls, per-request auth and 50 MB uploads against bare baselines.

Three parts, each with its baseline measured in the same run, on loopback only:

- `call`: `Client.call_tool("echo", …)` (Python SDK client, `mode="legacy"`, httpx2 with a Bearer
  header) through a real `steamharness serve` (project examples/hello, published, account API
  key), against bench/bare_http_server.py (a lowlevel SDK server + `StreamableHTTPSessionManager`
  calling the same echo function in-process). Latency p50/p99 on one session each, ABBA blocks;
  then throughput with 16 concurrent clients (one session and one httpx2 client each), a fixed
  number of calls per round, rounds alternating ABBA, median calls/s. Repeated `--repeat`
  times (3) with fresh servers, the medians of the repetitions reported; the servers and
  everything they start are pinned to one core (`--pin`), the load generator to the others.
  Targets: throughput >= 0.4x bare, p50 <= bare p50 + 4 ms.
- `auth`: `Authenticator.from_header("Bearer shk_…")` for an account key against the server's
  SQLite store (created with the CLI), in this process, median over many iterations; references:
  the admin key (no database read) and the same key check written with the stdlib `sqlite3`.
  Then inside the server (bench/instrumented_serve.py times every from_header it runs) during
  sequential echo calls, with the tool-call p50 of the same period. Target: <= 0.2 ms.
- `upload`: `POST /api/workflows/{id}/files` with a 50 MiB body, against bare_http_server.py's
  `/upload` (streams the body to a temp file). Fresh processes for both; MiB/s (median) and the
  server process's memory: VmRSS sampled every 2 ms during each upload, and VmHWM before/after.
  Targets: throughput >= 0.5x raw, peak RSS growth <= 16 MiB.
- `observability` (not in the default parts): the same `steamharness serve` with metrics
  off (`STEAMHARNESS_METRICS_ENABLED=false`, the baseline), on, and on with traces exported
  over OTLP/HTTP to a sink on loopback, in rotating order: one client's p50, and the time
  per call under load (16 clients, the inverse of calls/s). Targets: metrics <= 5 % per
  call, tracing with an exporter <= 10 % over metrics on.
- `memory` (not in the default parts): the steamharness server's VmRSS while `--memory-calls`
  (10,000) echo calls go through 16 concurrent sessions: idle (after one call per session, so
  what is imported lazily is counted), every quarter, after the last call, and after the
  sessions closed. Target: VmRSS after the calls <= idle + 20 MiB. The bare server runs the
  same calls as the reference.
- `refusals` (not in the default parts): what a first client meets when it gets something
  wrong (issue 38), on a fresh `steamharness serve` and bare server, each kind of request
  against its baseline in rotating blocks: (a) `tools/call` with a mistyped argument (an
  isError result, no run) against a valid call, and against the bare server's refusal of a
  call without its argument (a JSON-RPC error); (b) `tools/list` with a wrong key (401 with
  a Bearer invalid_token challenge) against a valid key; (c) GET on an OAuth discovery path
  (404 oauth_not_offered) against GET /healthz. p50/p99 and their ratios.

Run: `python bench/http_call.py [--parts call,auth,upload] [--calls N] [--rounds N] [--round-calls N]
[--auth-iterations N] [--uploads N] [--profile-auth] [--repeat N] [--pin CPU|auto|none]
[--memory-calls N] [--samples N]`
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import hmac
import io
import json
import os
import pstats
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common
import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from webui.auth.keys import Authenticator
from webui.store.db import make_engine, sqlite_url

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "examples" / "hello"
HELLO_ID = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
BARE_SERVER = Path(__file__).resolve().parent / "bare_http_server.py"
INSTRUMENTED = Path(__file__).resolve().parent / "instrumented_serve.py"
STEAMHARNESS = Path(sys.executable).parent / "steamharness"
TEXT = "benchmark payload"
BLOCK = 25
CLIENTS = 16
UPLOAD_BYTES = 50 * 1024 * 1024  # the server's limit (Settings.max_file_bytes), exactly
MIB = 1024 * 1024
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
RSS_SAMPLE_INTERVAL = 0.002

P50_EXTRA_TARGET = 0.004  # steamharness p50 <= bare p50 + 4 ms
THROUGHPUT_TARGET = 0.4  # steamharness calls/s >= 0.4x bare (both on one core)
# The cores the servers (and the processes they start) are pinned to; the load generator runs
# on the others. Set by --pin in main(); empty: nothing pinned.
SERVER_CPUS: set[int] = set()
AUTH_TARGET = 0.0002  # from_header <= 0.2 ms
UPLOAD_TARGET = 0.5  # steamharness MiB/s >= 0.5x raw
RSS_TARGET_KIB = 16 * 1024  # peak RSS growth <= 16 MiB
MEMORY_TARGET_KIB = 20 * 1024  # server VmRSS after the memory part's calls <= idle + 20 MiB


def _describe(exc: BaseException) -> str:
    """The leaf exceptions of a (nested) exception group, else the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status_kib(pid: int, name: str) -> int:
    """A `VmRSS`/`VmHWM`-style line of /proc/<pid>/status, in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {name}")


# --------------------------------------------------------------------------- set-up and servers
@dataclass
class Workspace:
    """A temp dir with examples/hello registered and published, a user and its API key."""

    root: Path
    env: dict[str, str]
    key: str = ""

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def cli(self, *args: str, optional: bool = False) -> str:
        """Run a CLI command on the data dir; `optional`: a command this version lacks is skipped."""
        proc = subprocess.run(
            [str(STEAMHARNESS), *args, "--data-dir", str(self.data_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env,
            cwd=self.root,
        )
        if proc.returncode != 0:
            if optional and "No such command" in proc.stderr:
                return ""
            raise RuntimeError(f"steamharness {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    @classmethod
    def create(cls) -> Workspace:
        root = Path(tempfile.mkdtemp(prefix="shbench-http-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
        ws = cls(root=root, env=env)
        try:
            project = root / "projects" / "hello"
            shutil.copytree(HELLO, project, ignore=shutil.ignore_patterns("__pycache__"))
            ws.cli("projects", "add", str(project))
            ws.cli("projects", "publish", HELLO_ID)
            ws.cli("users", "create", "bench")
            # Newer versions also need a per-account project grant; older ones have no such command.
            ws.cli("users", "grant", "bench", "--project", HELLO_ID, optional=True)
            ws.key = ws.cli("keys", "create", "--user", "bench", "--project", HELLO_ID).strip()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return ws


@dataclass
class ServerProc:
    """One server subprocess on a free loopback port, started and stopped by PID."""

    label: str
    argv: list[str]
    ready_path: str
    ws: Workspace
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    procs: _common.ProcMap = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.ws.root / f"{self.label.split()[0]}-{self.port}.log"

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.argv, "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.ws.env, **self.extra_env},
                cwd=self.ws.root,  # not the checkout: a PYTHONPATH snapshot must win
            )
        self.procs[self.proc.pid] = _start_ticks(self.proc.pid)
        if SERVER_CPUS:
            # Before it starts any child: its zygote and workers inherit the same core.
            os.sched_setaffinity(self.proc.pid, SERVER_CPUS)
        deadline = time.monotonic() + START_TIMEOUT
        async with httpx2.AsyncClient(timeout=1) as hc:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.label} exited at start-up:\n{self.log_tail()}")
                with contextlib.suppress(httpx2.HTTPError):
                    await hc.get(self.base_url + self.ready_path)  # any HTTP answer: it is listening
                    self.record_children()
                    return
                await anyio.sleep(0.05)  # bounded by the deadline
        raise RuntimeError(f"{self.label} did not answer within {START_TIMEOUT:g}s:\n{self.log_tail()}")

    def record_children(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.procs.update(_common.descendants(self.proc.pid))

    def stop(self) -> None:
        """SIGTERM by PID and wait (graceful shutdown); then any recorded survivor, by PID."""
        if self.proc is None:
            return
        self.record_children()
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        _common.report_leftovers(self.label, _common.stop_pids(self.procs))

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
        raw = fh.read()
    return int(raw[raw.rindex(")") + 2 :].split()[19])


def steamharness_server(ws: Workspace, label: str = "steamharness serve", **env: str) -> ServerProc:
    argv = [str(STEAMHARNESS), "serve", "--data-dir", str(ws.data_dir)]
    return ServerProc(label, argv, "/openapi.json", ws, extra_env=env)


def bare_server(ws: Workspace) -> ServerProc:
    argv = [sys.executable, str(BARE_SERVER), "--upload-dir", str(ws.root / "raw-uploads")]
    return ServerProc("bare SDK server", argv, "/mcp", ws)


# --------------------------------------------------------------------------- part 1: tool calls
@dataclass
class Target:
    label: str
    url: str
    headers: dict[str, str]
    check: Callable[[Any], bool]
    latency: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)  # calls/s, one per round
    loaded: list[float] = field(default_factory=list)  # per-call latency under load
    pid: int = 0  # the server process, for CPU accounting during the throughput rounds
    cpu: dict[str, list[float]] = field(default_factory=dict)  # CPU seconds per call, one per round


def _hello_ok(sc: Any) -> bool:
    return isinstance(sc, dict) and sc.get("status") == "success" and sc.get("output") == {"text": TEXT}


def _bare_ok(sc: Any) -> bool:
    return sc == {"text": TEXT}


async def _open(stack: AsyncExitStack, target: Target) -> Client:
    hc = await stack.enter_async_context(
        httpx2.AsyncClient(headers=target.headers, timeout=httpx2.Timeout(30, read=300))
    )
    client = await stack.enter_async_context(
        Client(streamable_http_client(target.url, http_client=hc), mode="legacy")
    )
    await client.list_tools()
    return client


async def _call(target: Target, client: Client) -> float:
    t0 = time.perf_counter()
    result = await client.call_tool("echo", {"text": TEXT})
    elapsed = time.perf_counter() - t0
    if result.is_error or not target.check(result.structured_content):
        raise RuntimeError(f"{target.label}: unexpected echo result: {result.model_dump(exclude_none=True)}")
    return elapsed


def _stat_cpu(pid: int) -> tuple[int, float, float]:
    """(ppid, own CPU s, CPU s of its reaped children) from /proc/<pid>/stat; zeros if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            raw = fh.read()
    except OSError:
        return 0, 0.0, 0.0
    f = raw[raw.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(f[1]), (int(f[11]) + int(f[12])) / tick, (int(f[13]) + int(f[14])) / tick


def _cpu_snapshot(server_pid: int) -> dict[str, float]:
    """CPU seconds so far: this process (the clients), the server, the server's children (the
    zygote) and their reaped children (the workers, once the zygote has reaped them)."""
    kids = [_stat_cpu(p) for p in _common.descendants(server_pid) if _stat_cpu(p)[0] == server_pid]
    return {
        "client": time.process_time(),
        "server": _stat_cpu(server_pid)[1],
        "zygote": sum(k[1] for k in kids),
        "workers": sum(k[2] for k in kids),
    }


async def _round(target: Target, clients: list[Client], calls: int) -> tuple[float, list[float]]:
    """`calls` calls spread over the clients, all running at once; (calls/s, per-call latencies)."""
    per_client = [calls // len(clients) + (1 if i < calls % len(clients) else 0) for i in range(len(clients))]
    latencies: list[float] = []

    async def run(client: Client, n: int) -> None:
        for _ in range(n):
            latencies.append(await _call(target, client))

    cpu0 = _cpu_snapshot(target.pid)
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for client, n in zip(clients, per_client, strict=True):
            tg.start_soon(run, client, n)
    rate = calls / (time.perf_counter() - t0)
    cpu1 = _cpu_snapshot(target.pid)
    for k, v in cpu1.items():
        target.cpu.setdefault(k, []).append((v - cpu0[k]) / calls)
    return rate, latencies


@dataclass
class CallSummary:
    """One repetition of [call]: p50 latency of one client and median calls/s of 16, per server."""

    bare_p50: float
    sh_p50: float
    bare_rate: float
    sh_rate: float
    sh_cpu_ms: float  # server + zygote + workers, CPU ms per call under load (median of rounds)
    bare_cpu_ms: float


async def _latency(targets: list[Target], calls: int) -> None:
    """One session per target: `calls` warm-up calls each, then `calls` measured ones in
    blocks of BLOCK, the targets' order rotating every block (ABBA for two)."""
    async with AsyncExitStack() as stack:
        clients = [await _open(stack, t) for t in targets]
        for t, c in zip(targets, clients, strict=True):
            for _ in range(calls):
                await _call(t, c)
        done, order = 0, list(zip(targets, clients, strict=True))
        while done < calls:
            n = min(BLOCK, calls - done)
            for t, c in order:
                for _ in range(n):
                    t.latency.append(await _call(t, c))
            order, done = order[1:] + order[:1], done + n


async def _throughput(targets: list[Target], rounds: int, round_calls: int) -> None:
    """CLIENTS sessions per target: one warm-up round each, then `rounds` measured rounds,
    the targets' order rotating every round (ABBA for two)."""
    async with AsyncExitStack() as stack:
        pools = [[await _open(stack, t) for _ in range(CLIENTS)] for t in targets]
        for t, pool in zip(targets, pools, strict=True):
            await _round(t, pool, round_calls)
            t.cpu.clear()
        order = list(zip(targets, pools, strict=True))
        for _ in range(rounds):
            for t, pool in order:
                rate, lat = await _round(t, pool, round_calls)
                t.throughput.append(rate)
                t.loaded.extend(lat)
            order = order[1:] + order[:1]


async def part_call(ws: Workspace, calls: int, rounds: int, round_calls: int) -> CallSummary:
    """Latency then throughput against both servers (fresh processes each time)."""
    sh, bare = steamharness_server(ws), bare_server(ws)
    try:
        await sh.start()
        await bare.start()
        targets = [
            Target(bare.label, f"{bare.base_url}/mcp", {}, _bare_ok),
            Target(
                sh.label,
                f"{sh.base_url}/api/workflows/{HELLO_ID}/mcp?target=latest",
                {"Authorization": f"Bearer {ws.key}"},
                _hello_ok,
            ),
        ]
        assert bare.proc is not None and sh.proc is not None
        targets[0].pid, targets[1].pid = bare.proc.pid, sh.proc.pid
        print(f"\n[call] latency: one session per server, {calls} warm-up + {calls} measured calls each")
        await _latency(targets, calls)
        sh.record_children()
        print(
            f"[call] throughput: {CLIENTS} concurrent clients (one session each) per server, "
            f"{round_calls} calls per round, 1 warm-up + {rounds} measured rounds each, ABBA"
        )
        await _throughput(targets, rounds, round_calls)
        sh.record_children()
    finally:
        sh.stop()
        bare.stop()
    return report_call(targets)


def report_call(targets: list[Target]) -> CallSummary:
    bare, sh = targets
    for t in targets:
        p50, p99 = _common.percentile(t.latency, 50), _common.percentile(t.latency, 99)
        print(f"  {t.label:<20} p50 {_common.ms(p50)}   p99 {_common.ms(p99)}   (n={len(t.latency)})")
    b50, s50 = _common.percentile(bare.latency, 50), _common.percentile(sh.latency, 50)
    b99, s99 = _common.percentile(bare.latency, 99), _common.percentile(sh.latency, 99)
    verdict = "met" if s50 <= b50 + P50_EXTRA_TARGET else "NOT met"
    print(
        f"  steamharness - bare      p50 {_common.ms(s50 - b50)}   ratio p50 {s50 / b50:.2f}x   "
        f"p99 {s99 / b99:.2f}x   (target p50 <= bare + {P50_EXTRA_TARGET * 1000:g} ms: {verdict})"
    )
    for t in targets:
        rates = ", ".join(f"{r:.0f}" for r in t.throughput)
        med = _common.percentile(t.throughput, 50)
        l50, l99 = _common.percentile(t.loaded, 50), _common.percentile(t.loaded, 99)
        print(
            f"  {t.label:<20} {med:8.1f} calls/s median  [{rates}]   "
            f"per call under load p50 {_common.ms(l50).strip()}, p99 {_common.ms(l99).strip()}"
        )
    for t in targets:
        parts = ", ".join(f"{k} {_common.percentile(v, 50) * 1000:.2f}" for k, v in t.cpu.items())
        print(f"  {t.label:<20} CPU ms per call (median of rounds): {parts}")
    r = _common.percentile(sh.throughput, 50) / _common.percentile(bare.throughput, 50)
    paired = sorted(s / b for s, b in zip(sh.throughput, bare.throughput, strict=True))
    verdict = "met" if r >= THROUGHPUT_TARGET else "NOT met"
    print(
        f"  throughput steamharness/bare   {r:.3f}x (medians; per-round pairs "
        f"{paired[0]:.3f}..{paired[-1]:.3f})   (target >= {THROUGHPUT_TARGET:g}x: {verdict})"
    )

    def cpu_ms(t: Target) -> float:
        return (
            sum(_common.percentile(t.cpu.get(k, [0.0]), 50) for k in ("server", "zygote", "workers")) * 1000
        )

    return CallSummary(
        bare_p50=b50,
        sh_p50=s50,
        bare_rate=_common.percentile(bare.throughput, 50),
        sh_rate=_common.percentile(sh.throughput, 50),
        sh_cpu_ms=cpu_ms(sh),
        bare_cpu_ms=cpu_ms(bare),
    )


def report_repeats(summaries: list[CallSummary]) -> None:
    """Medians over the repetitions (each with fresh servers): what the goals are read from."""

    def med(values: list[float]) -> float:
        ordered = sorted(values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    n = len(summaries)
    extra = med([s.sh_p50 - s.bare_p50 for s in summaries])
    rate = med([s.sh_rate / s.bare_rate for s in summaries])
    cpu = med([s.sh_cpu_ms / s.bare_cpu_ms for s in summaries if s.bare_cpu_ms > 0] or [0.0])
    pinned = f"servers pinned to CPU {sorted(SERVER_CPUS)}" if SERVER_CPUS else "nothing pinned"
    print(f"\n[call] medians of {n} repetitions ({pinned}):")
    print(
        f"  one client p50: bare {_common.ms(med([s.bare_p50 for s in summaries])).strip()}, "
        f"steamharness {_common.ms(med([s.sh_p50 for s in summaries])).strip()}, "
        f"extra {_common.ms(extra).strip()} (target <= bare + {P50_EXTRA_TARGET * 1000:g} ms: "
        f"{'met' if extra <= P50_EXTRA_TARGET else 'NOT met'})"
    )
    print(
        f"  {CLIENTS} clients: steamharness/bare calls/s {rate:.3f}x "
        f"(target >= {THROUGHPUT_TARGET:g}x: {'met' if rate >= THROUGHPUT_TARGET else 'NOT met'}); "
        f"CPU per call {med([s.sh_cpu_ms for s in summaries]):.2f} ms vs "
        f"{med([s.bare_cpu_ms for s in summaries]):.2f} ms bare ({cpu:.1f}x)"
    )


# --------------------------------------------------------------------------- part: observability
OBSERVABILITY_TARGETS = {"metrics": 0.05, "tracing": 0.10}


class _Sink:
    """An OTLP/HTTP receiver that takes every export and keeps nothing (loopback)."""

    def __init__(self) -> None:
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def part_observability(ws: Workspace, calls: int, rounds: int, round_calls: int) -> dict[str, float]:
    """The same server three ways: metrics off (the baseline), metrics on, and metrics on
    with traces exported over OTLP/HTTP to a sink on loopback. One client's p50 (blocks in
    rotating order), then calls/s with CLIENTS concurrent clients (rounds in rotating
    order), each on a data dir of its own."""
    sink = _Sink()
    # One data dir each (a data dir is served by one process at a time).
    spaces = [ws, Workspace.create(), Workspace.create()]
    servers = [
        steamharness_server(spaces[0], "metrics off", STEAMHARNESS_METRICS_ENABLED="false"),
        steamharness_server(spaces[1], "metrics on", STEAMHARNESS_METRICS_ENABLED="true"),
        steamharness_server(
            spaces[2],
            "+ tracing",
            STEAMHARNESS_METRICS_ENABLED="true",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=sink.url,
        ),
    ]
    try:
        for s in servers:
            await s.start()
        targets = [
            Target(
                s.label,
                f"{s.base_url}/api/workflows/{HELLO_ID}/mcp?target=latest",
                {"Authorization": f"Bearer {s.ws.key}"},
                _hello_ok,
            )
            for s in servers
        ]
        await _latency(targets, calls)
        await _throughput(targets, rounds, round_calls)
    finally:
        for s in servers:
            s.stop()
        sink.close()
        for extra in spaces[1:]:
            shutil.rmtree(extra.root, ignore_errors=True)
    for t in targets:
        print(
            f"  {t.label:<12} p50 {_common.ms(_common.percentile(t.latency, 50))}  "
            f"{_common.percentile(t.throughput, 50):8.1f} calls/s median"
        )
    off, metered, traced = targets

    def per_call(a: Target, b: Target) -> float:  # time per call of a over b, under load
        return _common.percentile(b.throughput, 50) / _common.percentile(a.throughput, 50)

    def p50(a: Target, b: Target) -> float:
        return _common.percentile(a.latency, 50) / _common.percentile(b.latency, 50)

    return {
        "metrics_p50": p50(metered, off),
        "metrics_per_call": per_call(metered, off),
        "tracing_p50": p50(traced, metered),
        "tracing_per_call": per_call(traced, metered),
    }


def report_observability(results: list[dict[str, float]]) -> None:
    def med(values: list[float]) -> float:
        ordered = sorted(values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    print(f"\n[observability] medians of {len(results)} repetitions:")
    for what, against in (("metrics", "metrics off"), ("tracing", "metrics on, no exporter")):
        p50 = med([r[f"{what}_p50"] for r in results])
        cost = med([r[f"{what}_per_call"] for r in results])
        goal = OBSERVABILITY_TARGETS[what]
        print(
            f"  {what} on / {against}: one client p50 {p50:.3f}x; time per call under load {cost:.3f}x"
            f" (target <= {1 + goal:.2f}x: {'met' if cost <= 1 + goal else 'NOT met'})"
        )


# --------------------------------------------------------------------------- part: refusals
# The paths clients probe first after a 401 (what the Python SDK's OAuth provider asks first).
OAUTH_PROBE = f"/.well-known/oauth-protected-resource/api/workflows/{HELLO_ID}/mcp"


@dataclass
class Series:
    """One kind of request: `once` sends it and checks its answer; `samples` its timed runs."""

    label: str
    once: Callable[[], Awaitable[object]]
    samples: list[float] = field(default_factory=list)


async def _interleaved(series: list[Series], n: int) -> None:
    """`n` warm-up requests per series, then `n` measured ones in blocks of BLOCK, the series'
    order rotating every block (ABBA for two)."""
    for s in series:
        for _ in range(n):
            await s.once()
    done, order = 0, list(series)
    while done < n:
        k = min(BLOCK, n - done)
        for s in order:
            for _ in range(k):
                t0 = time.perf_counter()
                await s.once()
                s.samples.append(time.perf_counter() - t0)
        order, done = order[1:] + order[:1], done + k


def _report_series(series: list[Series], pairs: list[tuple[int, int]]) -> None:
    """p50/p99 of each series, then the ratio of each (a, b) pair: p50 (p99)."""
    for s in series:
        p50, p99 = _common.percentile(s.samples, 50), _common.percentile(s.samples, 99)
        print(f"  {s.label:<46} p50 {_common.ms(p50)}   p99 {_common.ms(p99)}   (n={len(s.samples)})")
    for a, b in pairs:
        sa, sb = series[a], series[b]
        r50 = _common.ratio(_common.percentile(sa.samples, 50), _common.percentile(sb.samples, 50))
        r99 = _common.ratio(_common.percentile(sa.samples, 99), _common.percentile(sb.samples, 99))
        print(f"  ratio {sa.label} / {sb.label}: p50 {r50} (p99 {r99})")


def _store_counts(ws: Workspace) -> tuple[int, int]:
    """(runs, tool.failed audit events) in the workspace's store; read while no server runs."""
    conn = sqlite3.connect(f"file:{ws.data_dir / 'steamharness.sqlite3'}?mode=ro", uri=True)
    try:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        failed = conn.execute("SELECT count(*) FROM audit_events WHERE event = 'tool.failed'").fetchone()[0]
    finally:
        conn.close()
    return int(runs), int(failed)


async def _check_challenge(sh: ServerProc, mcp_url: str, wrong_key: str) -> None:
    """The wrong key's 401 carries the Bearer invalid_token challenge (what (b) measures)."""
    async with httpx2.AsyncClient(timeout=30) as hc:
        r = await hc.post(mcp_url, headers={"Authorization": f"Bearer {wrong_key}"}, json={})
    challenge = r.headers.get("www-authenticate", "")
    if (
        r.status_code != 401
        or not challenge.startswith("Bearer ")
        or 'error="invalid_token"' not in challenge
    ):
        raise RuntimeError(f"{sh.label}: a wrong key got {r.status_code} {challenge!r}")


async def part_refusals(ws: Workspace, n: int) -> None:
    """What a first client meets when it gets something wrong (issue 38), each against its
    baseline in the same run: (a) a mistyped argument, now an isError result and no run, against
    a valid call and against the bare server's refusal of a call it cannot run; (b) tools/list
    with a wrong key (401 with a Bearer challenge) against a valid key; (c) GET on an OAuth
    discovery path (404 oauth_not_offered) against GET /healthz."""
    wrong_key = f"shk_{secrets.token_hex(8)}_{secrets.token_urlsafe(24)}"  # well-formed, unknown
    # Above the wrong keys this part sends, so that every one is the 401 a first user meets
    # (past the default 30 per address they would be throttled to 429s held 1 s).
    sh = steamharness_server(ws, STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS=str(2 * n + 100))
    bare = bare_server(ws)
    mcp_url = f"{sh.base_url}/api/workflows/{HELLO_ID}/mcp?target=latest"
    valid = {"Authorization": f"Bearer {ws.key}"}
    runs0, failed0 = _store_counts(ws)
    print(
        f"\n[refusals] fresh servers; Python SDK client (mode=legacy) over Streamable HTTP; {n} warm-up + "
        f"{n} measured requests per series, blocks of {BLOCK}, the order rotating every block"
    )
    try:
        await sh.start()
        await bare.start()
        await _check_challenge(sh, mcp_url, wrong_key)
        async with AsyncExitStack() as stack:
            bare_t = Target(bare.label, f"{bare.base_url}/mcp", {}, _bare_ok)
            bare_c = await _open(stack, bare_t)
            sh_t = Target(sh.label, mcp_url, valid, _hello_ok)
            sh_c = await _open(stack, sh_t)
            # A session opened with the valid key whose client then sends a wrong one.
            wrong_hc = await stack.enter_async_context(httpx2.AsyncClient(headers=valid, timeout=30))
            wrong_c = await stack.enter_async_context(
                Client(streamable_http_client(mcp_url, http_client=wrong_hc), mode="legacy")
            )
            wrong_hc.headers["Authorization"] = f"Bearer {wrong_key}"
            # The valid key again before the session's DELETE (the stack closes in reverse).
            stack.callback(wrong_hc.headers.__setitem__, "Authorization", f"Bearer {ws.key}")
            plain = await stack.enter_async_context(httpx2.AsyncClient(timeout=30))

            async def bare_valid() -> None:
                await _call(bare_t, bare_c)

            async def bare_invalid() -> None:
                # The bare server validates nothing: a missing argument is its handler's KeyError,
                # which the SDK answers as a JSON-RPC error (the client raises).
                try:
                    await bare_c.call_tool("echo", {})
                except MCPError as exc:
                    if "text" not in exc.message:
                        raise RuntimeError(f"bare: unexpected refusal: {exc}") from exc
                    return
                raise RuntimeError("bare: a call without its argument was answered")

            async def sh_valid() -> None:
                await _call(sh_t, sh_c)

            async def sh_invalid() -> None:
                r = await sh_c.call_tool("echo", {"text": 5})
                sc = r.structured_content
                error = sc.get("error") if isinstance(sc, dict) else None
                if not r.is_error or not isinstance(error, dict) or error.get("code") != "invalid_params":
                    raise RuntimeError(f"{sh.label}: mistyped argument: {r.model_dump(exclude_none=True)}")

            async def list_valid() -> None:
                tools = (await sh_c.list_tools()).tools
                if "echo" not in {t.name for t in tools}:
                    raise RuntimeError(f"{sh.label}: tools/list without echo")

            async def list_wrong() -> None:
                try:
                    await wrong_c.list_tools()
                except MCPError as exc:
                    if exc.code != -32001 or "invalid API key" not in exc.message:
                        raise RuntimeError(f"{sh.label}: wrong key: {exc}") from exc
                    return
                raise RuntimeError(f"{sh.label}: tools/list answered a wrong key")

            async def get_oauth() -> None:
                r = await plain.get(sh.base_url + OAUTH_PROBE)
                if r.status_code != 404 or r.json().get("error") != "oauth_not_offered":
                    raise RuntimeError(f"{sh.label}: GET {OAUTH_PROBE}: {r.status_code} {r.text[:200]}")

            async def get_healthz() -> None:
                r = await plain.get(sh.base_url + "/healthz")
                if r.status_code != 200:
                    raise RuntimeError(f"{sh.label}: GET /healthz: {r.status_code} {r.text[:200]}")

            calls = [
                Series("steamharness mistyped argument (isError)", sh_invalid),
                Series("steamharness valid call (a run)", sh_valid),
                Series("bare missing argument (JSON-RPC error)", bare_invalid),
                Series("bare valid call", bare_valid),
            ]
            keys = [
                Series("tools/list, wrong key (401)", list_wrong),
                Series("tools/list, valid key", list_valid),
            ]
            probes = [
                Series("GET oauth-protected-resource/… (404)", get_oauth),
                Series("GET /healthz", get_healthz),
            ]
            for group in (calls, keys, probes):
                await _interleaved(group, n)
                sh.record_children()
    finally:
        sh.stop()
        bare.stop()
    runs1, failed1 = _store_counts(ws)
    print('[refusals] (a) tools/call echo: {"text": 5} against {"text": …}, one session per server')
    _report_series(calls, [(0, 1), (0, 2), (2, 3)])
    print(
        f"  runs created {runs1 - runs0} (the {2 * n} valid calls; none for the {2 * n} mistyped ones: "
        f"{'yes' if runs1 - runs0 == 2 * n else 'NO'}), tool.failed events {failed1 - failed0}"
    )
    print(
        "[refusals] (b) tools/list on steamharness, one session each "
        "(the wrong key's session opened with the valid key)"
    )
    _report_series(keys, [(0, 1)])
    print("[refusals] (c) GET on steamharness, no credential, one kept-alive connection")
    _report_series(probes, [(0, 1)])


# --------------------------------------------------------------------------- part 4: memory
async def _memory_run(server: ServerProc, target: Target, total: int) -> list[tuple[str, int]]:
    """VmRSS (KiB) of the server at each stage of `total` calls over CLIENTS sessions."""
    assert server.proc is not None
    pid = server.proc.pid
    samples: list[tuple[str, int]] = []
    quarter = max(CLIENTS, total // 4)
    async with AsyncExitStack() as stack:
        clients = [await _open(stack, target) for _ in range(CLIENTS)]
        for c in clients:
            await _call(target, c)
        samples.append(("idle (1 call per session)", _status_kib(pid, "VmRSS")))
        done = 0
        while done < total:
            n = min(quarter, total - done)
            await _round(target, clients, n)
            done += n
            samples.append((f"after {done} calls", _status_kib(pid, "VmRSS")))
        server.record_children()
    samples.append(("sessions closed", _status_kib(pid, "VmRSS")))
    return samples


async def part_memory(ws: Workspace, total: int) -> None:
    """Server VmRSS over many calls: steamharness against the bare SDK server (reference)."""
    print(
        f"\n[memory] {total} echo calls over {CLIENTS} concurrent sessions per server; "
        "VmRSS of the server process"
    )
    for make, url, headers, check in (
        (bare_server, "/mcp", {}, _bare_ok),
        (
            steamharness_server,
            f"/api/workflows/{HELLO_ID}/mcp?target=latest",
            {"Authorization": f"Bearer {ws.key}"},
            _hello_ok,
        ),
    ):
        server = make(ws)
        try:
            await server.start()
            target = Target(server.label, server.base_url + url, headers, check)
            assert server.proc is not None
            target.pid = server.proc.pid
            samples = await _memory_run(server, target, total)
        finally:
            server.stop()
        idle = samples[0][1]
        stages = ", ".join(f"{label} {kib / 1024:.1f}" for label, kib in samples)
        print(f"  {server.label:<20} VmRSS MiB: {stages}")
        after = max(kib for label, kib in samples[1:-1])
        growth = after - idle
        tag = "reference"
        if server.label.startswith("steamharness"):
            verdict = "met" if growth <= MEMORY_TARGET_KIB else "NOT met"
            tag = f"target <= {MEMORY_TARGET_KIB // 1024} MiB: {verdict}"
        print(f"  {server.label:<20} growth idle -> after the calls (max) {growth / 1024:+.1f} MiB   ({tag})")


# --------------------------------------------------------------------------- part 2: auth
def _raw_sqlite_check(conn: sqlite3.Connection, secret_key: bytes, raw: str) -> tuple[str, str]:
    """The same key check as Authenticator.authenticate, written against the stdlib sqlite3."""
    public, _, secret = raw.removeprefix("shk_").partition("_")
    row = conn.execute(
        "SELECT k.secret_hash, k.revoked_at, k.scopes, k.projects, a.id, a.name, a.disabled "
        "FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.id = ?",
        (f"key_{public}",),
    ).fetchone()
    if row is None or not hmac.compare_digest(hashlib.sha256(secret.encode()).hexdigest(), row[0]):
        raise RuntimeError("raw check: invalid key")
    if row[1] is not None or row[6]:
        raise RuntimeError("raw check: revoked or disabled")
    return f"user:{row[5]}", hmac.new(secret_key, raw.encode(), hashlib.sha256).hexdigest()[:32]


def part_auth(ws: Workspace, iterations: int, call_p50: float | None, profile: bool) -> None:
    """`from_header` in a loop in this process, against references; no server is running."""
    db = ws.data_dir / "steamharness.sqlite3"
    engine = make_engine(sqlite_url(db))
    admin_key = secrets.token_urlsafe(32)
    secret_key = os.urandom(32)
    auth = Authenticator(engine, admin_key=admin_key, fingerprint_secret=secret_key)
    conn = sqlite3.connect(db, check_same_thread=False)
    key_header, admin_header = f"Bearer {ws.key}", f"Bearer {admin_key}"
    if auth.from_header(key_header).kind != "key" or auth.from_header(admin_header).kind != "admin":
        raise RuntimeError("auth: unexpected principal")
    cases: list[tuple[str, Callable[[], object]]] = [
        ("from_header(account key)", lambda: auth.from_header(key_header)),
        ("from_header(admin key, no DB)", lambda: auth.from_header(admin_header)),
        ("same key check, stdlib sqlite3", lambda: _raw_sqlite_check(conn, secret_key, ws.key)),
        ("empty loop (timer only)", lambda: None),
    ]
    samples: dict[str, list[float]] = {label: [] for label, _ in cases}
    block = 100
    print(
        f"\n[auth] isolated loop in this process: {iterations} iterations per case after "
        f"{iterations // 10} warm-up, blocks of {block} rotating the order; store: {db.name} (SQLite, WAL)"
    )
    prof = cProfile.Profile()
    try:
        for _, fn in cases:
            for _ in range(iterations // 10):
                fn()
        order = list(cases)
        for _ in range(0, iterations, block):
            for label, fn in order:
                out = samples[label]
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    out.append(time.perf_counter() - t0)
            order = order[1:] + order[:1]
        if profile:
            prof.enable()
            for _ in range(iterations):
                auth.from_header(key_header)
            prof.disable()
    finally:
        conn.close()
        engine.dispose()
    key_p50 = _common.percentile(samples[cases[0][0]], 50)
    for label, _ in cases:
        p50, p99 = _common.percentile(samples[label], 50), _common.percentile(samples[label], 99)
        rel = f"   1/{key_p50 / p50:.0f} of the account-key check" if label != cases[0][0] else ""
        print(f"  {label:<32} p50 {p50 * 1e6:8.1f} us   p99 {p99 * 1e6:8.1f} us{rel}")
    verdict = "met" if key_p50 <= AUTH_TARGET else "NOT met"
    print(f"  target from_header(account key) p50 <= {AUTH_TARGET * 1000:g} ms (isolated): {verdict}")
    if call_p50:
        print(
            f"  = {key_p50 / call_p50 * 100:.1f}% of the steamharness tool-call p50 of [call] "
            f"({_common.ms(call_p50).strip()})"
        )
    if profile:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
        print("\n[auth] cProfile of the isolated from_header(account key) loop, top 25 by cumulative time:")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


async def _dump(server: ServerProc, path: Path) -> dict[str, list[Any]]:
    """Ask instrumented_serve.py for its samples (SIGUSR1, by PID) and read them."""
    assert server.proc is not None
    path.unlink(missing_ok=True)
    os.kill(server.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not path.exists():
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise RuntimeError(f"no auth samples from {server.label}:\n{server.log_tail()}")
        await anyio.sleep(0.01)
    data: dict[str, list[Any]] = json.loads(path.read_text(encoding="utf-8"))
    path.unlink()
    return data


async def part_auth_in_server(ws: Workspace, calls: int) -> None:
    """`from_header` as the server runs it: one per HTTP request, timed inside the server."""
    dump = ws.root / "auth-samples.json"
    argv = [sys.executable, str(INSTRUMENTED), "--dump", str(dump), "serve", "--data-dir", str(ws.data_dir)]
    server = ServerProc("instrumented steamharness serve", argv, "/openapi.json", ws)
    target = Target(
        server.label,
        f"{server.base_url}/api/workflows/{HELLO_ID}/mcp?target=latest",
        {"Authorization": f"Bearer {ws.key}"},
        _hello_ok,
    )
    print(
        f"\n[auth] inside the server (bench/instrumented_serve.py): one session, {calls} warm-up + "
        f"{calls} measured echo calls; every from_header the server runs is timed"
    )
    try:
        await server.start()
        async with AsyncExitStack() as stack:
            client = await _open(stack, target)
            for _ in range(calls):
                await _call(target, client)
            await _dump(server, dump)  # discard the warm-up
            for _ in range(calls):
                target.latency.append(await _call(target, client))
            data = await _dump(server, dump)
            server.record_children()
    finally:
        server.stop()
    wall, cpu, with_gc = data["wall"], data["cpu"], data["gc"]
    no_gc = [w for w, g in zip(wall, with_gc, strict=True) if not g]
    w50, w99 = _common.percentile(wall, 50), _common.percentile(wall, 99)
    c50 = _common.percentile(cpu, 50)
    call50 = _common.percentile(target.latency, 50)
    print(
        f"  from_header in the server   p50 {w50 * 1e6:8.1f} us   p99 {w99 * 1e6:8.1f} us   "
        f"thread CPU p50 {c50 * 1e6:.1f} us   (n={len(wall)} requests for {calls} calls)"
    )
    gc_share = (len(wall) - len(no_gc)) / len(wall) * 100
    no_gc_p50 = f"{_common.percentile(no_gc, 50) * 1e6:.1f} us" if no_gc else "n/a"
    print(f"  calls with a GC collection inside: {gc_share:.1f}%; p50 of the others {no_gc_p50}")
    verdict = "met" if w50 <= AUTH_TARGET else "NOT met"
    print(
        f"  tool-call p50 in the same period {_common.ms(call50).strip()}: from_header p50 is "
        f"{w50 / call50 * 100:.1f}% of it   "
        f"(target p50 <= {AUTH_TARGET * 1000:g} ms in the server: {verdict})"
    )


# --------------------------------------------------------------------------- part 3: uploads
@dataclass
class Upload:
    label: str
    server: ServerProc
    url: str
    params: dict[str, str]
    headers: dict[str, str]
    check: Callable[[httpx2.Response], bool]
    rates: list[float] = field(default_factory=list)  # MiB/s
    growth_kib: list[int] = field(default_factory=list)  # sampled peak VmRSS - VmRSS before
    rss_before: int = 0
    hwm_before: int = 0
    hwm_after: int = 0


class RssSampler:
    """A thread reading VmRSS of one process every RSS_SAMPLE_INTERVAL while an upload runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = _status_kib(pid, "VmRSS")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status_kib(self.pid, "VmRSS"))
            self._stop.wait(RSS_SAMPLE_INTERVAL)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _status_kib(self.pid, "VmRSS"))


async def _upload(hc: httpx2.AsyncClient, up: Upload, payload: bytes, measure: bool) -> None:
    assert up.server.proc is not None
    pid = up.server.proc.pid
    before = _status_kib(pid, "VmRSS")
    with RssSampler(pid) as sampler:
        t0 = time.perf_counter()
        resp = await hc.post(up.url, params=up.params, headers=up.headers, content=payload)
        elapsed = time.perf_counter() - t0
    if resp.status_code != 201 or not up.check(resp):
        raise RuntimeError(f"{up.label}: upload answered {resp.status_code}: {resp.text[:300]}")
    if measure:
        up.rates.append(len(payload) / MIB / elapsed)
        up.growth_kib.append(sampler.peak - before)


async def part_upload(ws: Workspace, uploads: int) -> None:
    payload = os.urandom(UPLOAD_BYTES)
    sha = hashlib.sha256(payload).hexdigest()
    small = payload[:MIB]
    sh, bare = steamharness_server(ws), bare_server(ws)
    try:
        await sh.start()
        await bare.start()
        items = [
            Upload(
                "raw streaming upload",
                bare,
                f"{bare.base_url}/upload",
                {},
                {"Content-Type": "application/octet-stream"},
                lambda r: r.json()["size"] in (UPLOAD_BYTES, MIB),
            ),
            Upload(
                "steamharness POST …/files",
                sh,
                f"{sh.base_url}/api/workflows/{HELLO_ID}/files",
                {"fileName": "payload.bin", "mimeType": "application/octet-stream"},
                {"Content-Type": "application/octet-stream", "Authorization": f"Bearer {ws.key}"},
                lambda r: r.json()["data"][0]["size"] in (UPLOAD_BYTES, MIB),
            ),
        ]
        print(
            f"\n[upload] fresh server processes; 1 MiB warm-up, then {uploads} uploads of "
            f"{UPLOAD_BYTES // MIB} MiB each (Content-Length), ABBA; VmRSS sampled every "
            f"{RSS_SAMPLE_INTERVAL * 1000:g} ms"
        )
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as hc:
            for up in items:
                await _upload(hc, up, small, measure=False)
                assert up.server.proc is not None
                up.rss_before = _status_kib(up.server.proc.pid, "VmRSS")
                up.hwm_before = _status_kib(up.server.proc.pid, "VmHWM")
            order = items
            for _ in range(uploads):
                for up in order:
                    await _upload(hc, up, payload, measure=True)
                order = order[::-1]
            for up in items:
                assert up.server.proc is not None
                up.hwm_after = _status_kib(up.server.proc.pid, "VmHWM")
            # The stored blob must be the payload, byte for byte.
            blob = ws.data_dir / "files" / sha[:2] / sha
            if not blob.is_file() or blob.stat().st_size != UPLOAD_BYTES:
                raise RuntimeError(f"steamharness: blob {blob} missing or wrong size")
            sh.record_children()
    finally:
        sh.stop()
        bare.stop()
    raw, up_sh = items
    for up in items:
        med = _common.percentile(up.rates, 50)
        rates = ", ".join(f"{r:.0f}" for r in up.rates)
        growth = ", ".join(f"{g / 1024:.1f}" for g in up.growth_kib)
        print(
            f"  {up.label:<26} {med:7.1f} MiB/s median [{rates}]   "
            f"RSS before {up.rss_before / 1024:.1f} MiB, sampled growth per upload [{growth}] MiB, "
            f"VmHWM {up.hwm_before / 1024:.1f} -> {up.hwm_after / 1024:.1f} MiB"
        )
    r = _common.percentile(up_sh.rates, 50) / _common.percentile(raw.rates, 50)
    verdict = "met" if r >= UPLOAD_TARGET else "NOT met"
    print(f"  throughput steamharness/raw   {r:.2f}x   (target >= {UPLOAD_TARGET:g}x: {verdict})")
    for up in items:
        peak = max(max(up.growth_kib), up.hwm_after - up.rss_before)
        verdict = "met" if peak <= RSS_TARGET_KIB else "NOT met"
        tag = f"(target <= {RSS_TARGET_KIB // 1024} MiB: {verdict})" if up is up_sh else "(reference)"
        print(
            f"  peak RSS growth {up.label:<26} {peak / 1024:6.1f} MiB "
            f"(max of sampled peaks and VmHWM after - VmRSS before)   {tag}"
        )


# --------------------------------------------------------------------------- main
def _print_logs(ws: Workspace, lines: int = 15) -> None:
    for log in sorted(ws.root.glob("*.log")):
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        print(f"\n{log.name} (last lines):\n{tail}", file=sys.stderr)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--parts",
        default="call,auth,upload",
        help="comma-separated: call, auth, upload, memory, observability, refusals",
    )
    parser.add_argument(
        "--calls", type=int, default=300, help="latency: warm-up and measured calls (1..5000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=6, help="throughput: measured rounds per server (1..50)"
    )
    parser.add_argument(
        "--round-calls", type=int, default=320, help=f"throughput: calls per round ({CLIENTS}..5000)"
    )
    parser.add_argument("--auth-iterations", type=int, default=5000, help="auth: per case (100..100000)")
    parser.add_argument("--uploads", type=int, default=5, help="upload: 50 MiB uploads per server (1..20)")
    parser.add_argument("--profile-auth", action="store_true", help="auth: also print a cProfile")
    parser.add_argument(
        "--memory-calls", type=int, default=10_000, help="memory: calls per server (100..100000)"
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=200,
        help="refusals: warm-up and measured requests per series (20..5000)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="call: repetitions with fresh servers, medians reported (1..9)"
    )
    parser.add_argument(
        "--pin",
        default="auto",
        help="the CPU the servers run on (the load generator gets the others): auto (CPU 0 when"
        " there are 2 or more), a CPU number, or none",
    )
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin == "auto" and len(cpus) >= 2:
        SERVER_CPUS.add(cpus[0])
    elif args.pin not in ("auto", "none"):
        if not args.pin.isdigit() or int(args.pin) not in cpus or len(cpus) < 2:
            parser.error(f"--pin: {args.pin!r} is not one of this process's CPUs {cpus} (or only one)")
        SERVER_CPUS.add(int(args.pin))
    if SERVER_CPUS:
        os.sched_setaffinity(0, set(cpus) - SERVER_CPUS)  # the clients stay off the servers' core
    parts = args.parts.split(",")
    for p in parts:
        if p not in ("call", "auth", "upload", "memory", "observability", "refusals"):
            parser.error(f"unknown part {p!r}")
    calls = max(1, min(args.calls, 5000))
    rounds = max(1, min(args.rounds, 50))
    round_calls = max(CLIENTS, min(args.round_calls, 5000))
    iterations = max(100, min(args.auth_iterations, 100_000))
    uploads = max(1, min(args.uploads, 20))
    repeat = max(1, min(args.repeat, 9))
    memory_calls = max(100, min(args.memory_calls, 100_000))
    samples = max(20, min(args.samples, 5000))

    print("Streamable HTTP benchmarks: steamharness serve against bare SDK / raw Starlette baselines")
    print(_common.machine_line())
    ws = Workspace.create()
    call_p50: float | None = None
    try:
        if "call" in parts:
            summaries: list[CallSummary] = []
            try:
                for i in range(repeat):
                    if repeat > 1:
                        print(f"\n[call] repetition {i + 1} of {repeat}")
                    summaries.append(await part_call(ws, calls, rounds, round_calls))
                call_p50 = summaries[-1].sh_p50
            except Exception as exc:
                print(f"  [call] failed: {_describe(exc)}")
                _print_logs(ws)
            if len(summaries) > 1:
                report_repeats(summaries)
        if "observability" in parts:
            results: list[dict[str, float]] = []
            for i in range(repeat):
                print(f"\n[observability] repetition {i + 1} of {repeat}: metrics off, on, + tracing")
                results.append(await part_observability(ws, calls, rounds, round_calls))
            report_observability(results)
        if "auth" in parts:
            part_auth(ws, iterations, call_p50, args.profile_auth)
            try:
                await part_auth_in_server(ws, calls)
            except Exception as exc:
                print(f"  [auth] in the server failed: {_describe(exc)}")
                _print_logs(ws)
        if "upload" in parts:
            try:
                await part_upload(ws, uploads)
            except Exception as exc:
                print(f"  [upload] failed: {_describe(exc)}")
                _print_logs(ws)
        if "memory" in parts:
            try:
                await part_memory(ws, memory_calls)
            except Exception as exc:
                print(f"  [memory] failed: {_describe(exc)}")
                _print_logs(ws)
        if "refusals" in parts:
            try:
                await part_refusals(ws, samples)
            except Exception as exc:
                print(f"  [refusals] failed: {_describe(exc)}")
                _print_logs(ws)
    finally:
        shutil.rmtree(ws.root, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main)
