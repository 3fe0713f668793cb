"""Insights page time at 1,000,000 runs: `/insights` for the hour, the day, the week, and the
week of one project, from a real `steamharness serve`.

A fresh SQLite store (in a `mkdtemp()` directory) is created at revision 0007 (before the
rollups), its `runs` table filled with N finished runs (sqlite3 `executemany`, 20,000 rows
a transaction, every index of the table in place): spread over the last 7 days, 40 tools in
10 projects with Zipf-like traffic, mostly `success`, some `failed` / `timeout` /
`cancelled`, durations log-normal around a median of each tool's own (ms to minutes). Then
the store is upgraded to head as a real upgrade does (`upgrade_database`): migration 0008
backfills the rollups from those runs, and that time is reported. A second store, the
baseline, is made the same way with `--baseline-runs` runs (default 1,000; 0: empty).

Both stores get the admin account and the `examples/hello` project (one of the ten project
ids; the others are shown by id), then each is served by `steamharness serve` on a free
loopback port. The script logs in through the login form (cookie session) and times
`GET /insights?window=…` from the client (loopback HTTP, keep-alive), both servers and every
window interleaved, one request per case a round, the order rotating and reversing each
round. For comparison it times the naive query the rollups replace: an aggregate over the
`runs` table for the week, straight on the 1M store with sqlite3.
Target: p99 <= 300 ms for every window at 1,000,000 runs.

Run: `python bench/insights.py [--runs N] [--baseline-runs N] [--repeats N]`
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import math
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import _common
import httpx2
from alembic import command

from webui.admin import create_user
from webui.insights.view import WINDOWS, window_since
from webui.settings import Settings
from webui.store.db import make_engine
from webui.store.models import DURATION_BOUNDS_MS
from webui.store.schema import alembic_config, upgrade_database

ROOT = Path(__file__).resolve().parent.parent
STEAMHARNESS = str(Path(sys.executable).parent / "steamharness")
HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"  # examples/hello, registered in both stores
BEFORE_ROLLUPS = "0007_run_trace"
BATCH = 20_000
WARMUP = 5
TARGET = 0.300
SPAN_S = 7 * 86_400
NAIVE_REPEATS = 3
START_TIMEOUT = 90.0
PROJECTS = [HELLO] + [f"{i:08x}-7a1e-4b2c-9d3e-5f6a7b8c9d0e" for i in range(1, 10)]
VERBS = ["fetch", "summarise", "validate", "post", "plan", "render", "sync", "score", "export", "index"]
NOUNS = ["report", "entry", "trip", "invoice", "ticket", "page", "order", "digest"]
FAILED = ("failed", "timeout")
FINAL = ("success", "failed", "cancelled", "timeout")
COLUMNS = (
    "id, project_id, project_version, entrypoint_id, entrypoint_title, source, transport, actor, "
    "status, params, owner, created_at, started_at, finished_at"
)
STAMP = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a DateTime in SQLite (UTC, naive)


# ------------------------------------------------------------------------------ the stores
@dataclass(frozen=True)
class Tool:
    project_id: str
    entrypoint_id: str
    title: str
    weight: float
    median_ms: float
    fail: float  # share of runs that fail
    timeout_s: int


def tools(seed: int = 11) -> list[Tool]:
    """40 tools, 4 a project; the first two are examples/hello's own."""
    rnd = random.Random(seed)
    out: list[Tool] = []
    for p, project in enumerate(PROJECTS):
        for t in range(4):
            i = len(out)
            if p == 0 and t < 2:
                entrypoint, title = ("greet", "Greet") if t == 0 else ("echo", "Echo")
            else:
                verb, noun = VERBS[i % len(VERBS)], NOUNS[(i * 3 + p) % len(NOUNS)]
                entrypoint, title = f"{verb}_{noun}", f"{verb.capitalize()} {noun}"
            out.append(
                Tool(
                    project_id=project,
                    entrypoint_id=entrypoint,
                    title=title,
                    weight=1 / (i + 1) ** 0.8,
                    median_ms=math.exp(rnd.uniform(math.log(5), math.log(20_000))),
                    fail=rnd.uniform(0.005, 0.08),
                    timeout_s=rnd.choice([30, 60, 300]),
                )
            )
    rnd.shuffle(out)  # the busiest tool is not always hello's
    return out


def realistic_runs(n: int, now: float, seed: int = 7) -> Iterator[tuple[object, ...]]:
    """n finished runs in the order they ended, the last ending at `now`, the first ~7 days before."""
    rnd = random.Random(seed)
    catalogue = tools()
    weights = [t.weight for t in catalogue]
    cumulative = [sum(weights[: i + 1]) for i in range(len(weights))]
    gap = SPAN_S / n
    for i in range(n):
        end = now - SPAN_S + (i + rnd.random()) * gap  # one run in each slice of the span
        tool = catalogue[bisect.bisect_left(cumulative, rnd.random() * cumulative[-1])]
        roll = rnd.random()
        if roll < tool.fail:
            status = "failed"
        elif roll < tool.fail + 0.01:
            status = "timeout"
        elif roll < tool.fail + 0.025:
            status = "cancelled"
        else:
            status = "success"
        if status == "timeout":
            duration = tool.timeout_s + rnd.uniform(0, 0.5)
        else:
            duration = min(1800.0, rnd.lognormvariate(math.log(tool.median_ms / 1000), 1.1))
        queued = min(duration / 2, rnd.expovariate(1 / 0.004))
        finished = datetime.fromtimestamp(end, UTC)
        yield (
            f"{finished:%Y%m%d}-{rnd.getrandbits(48):012x}",
            tool.project_id,
            "1.0.0",
            tool.entrypoint_id,
            tool.title,
            "mcp",
            "http",
            f"user:u{rnd.randrange(200):03d}",
            status,
            '{"text": "hello"}',
            None,
            datetime.fromtimestamp(end - duration, UTC).strftime(STAMP),
            datetime.fromtimestamp(end - duration + queued, UTC).strftime(STAMP),
            finished.strftime(STAMP),
        )


@dataclass
class Store:
    label: str
    data: Path
    runs: int
    fill_s: float = 0.0
    upgrade_s: float = 0.0
    upgrade_done: list[str] = field(default_factory=list)
    rollups: dict[int, tuple[int, int]] = field(default_factory=dict)  # period -> (rows, calls)
    size_mib: float = 0.0

    @property
    def db(self) -> Path:
        return Path(Settings(data_dir=self.data).resolved_database_url.removeprefix("sqlite:///"))


def make_store(label: str, data: Path, n: int, projects: Path) -> Store:
    """A store at 0007 filled with n runs, upgraded to head (the backfill), with the admin
    account and examples/hello registered."""
    store = Store(label, data, n)
    url = Settings(data_dir=data).resolved_database_url
    engine = make_engine(url)  # an empty SQLite store is created at head ...
    with engine.connect() as conn:
        command.downgrade(alembic_config(conn), BEFORE_ROLLUPS)  # ... and taken back before 0008
        conn.commit()
    engine.dispose()
    conn = sqlite3.connect(store.db, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    marks = ", ".join("?" * len(COLUMNS.split(", ")))
    stmt = f"INSERT INTO runs ({COLUMNS}) VALUES ({marks})"
    t0 = time.perf_counter()
    batch: list[tuple[object, ...]] = []
    written = 0
    for row in realistic_runs(n, time.time()):
        batch.append(row)
        if len(batch) == BATCH:
            conn.execute("BEGIN")
            conn.executemany(stmt, batch)
            conn.execute("COMMIT")
            written += len(batch)
            batch = []
            print(f"\r  {label}: filled {written:>9,}", end="", file=sys.stderr, flush=True)
    if batch:
        conn.execute("BEGIN")
        conn.executemany(stmt, batch)
        conn.execute("COMMIT")
    store.fill_s = time.perf_counter() - t0
    conn.close()
    if n >= BATCH:
        print(file=sys.stderr)
    engine = make_engine(url, check_schema=False)
    t0 = time.perf_counter()
    store.upgrade_done = upgrade_database(engine)
    store.upgrade_s = time.perf_counter() - t0
    create_user(engine, name=_common.ADMIN[0], admin=True, password=_common.ADMIN[1])
    engine.dispose()
    cli("projects", "add", str(projects / "hello"), "--data-dir", str(data))
    with contextlib.closing(sqlite3.connect(store.db)) as conn:
        for period, rows, calls in conn.execute(
            "SELECT period_s, count(*), coalesce(sum(calls), 0) FROM run_rollups GROUP BY period_s"
        ):
            store.rollups[int(period)] = (int(rows), int(calls))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.size_mib = store.db.stat().st_size / 2**20
    return store


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}


def cli(*args: str) -> str:
    done = subprocess.run(
        [STEAMHARNESS, *args], capture_output=True, text=True, env=env(), timeout=120, check=False
    )
    if done.returncode:
        raise SystemExit(f"steamharness {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


# ------------------------------------------------------------------------------ the servers
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`steamharness serve` on a store; every process under it recorded by PID once it answers."""

    def __init__(self, store: Store, base: Path) -> None:
        self.store = store
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / f"server-{store.label}.log"
        self.started: _common.ProcMap = {}
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [STEAMHARNESS, "serve", "--port", str(self.port), "--data-dir", str(store.data)],
            cwd=base,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env(),
        )
        log.close()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT  # a loaded machine starts it slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the {self.store.label} server exited at start-up:\n{self.log()}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    self.started = {self.proc.pid: _common.descendants()[self.proc.pid]}
                    self.started.update(_common.descendants(self.proc.pid))
                    return
            time.sleep(0.05)  # the port is not listening yet; bounded by the deadline
        raise SystemExit(f"the {self.store.label} server did not answer within {START_TIMEOUT:.0f} s")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        self.started.update(_common.descendants(self.proc.pid))  # any worker started since
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        _common.report_leftovers(f"insights ({self.store.label} server)", _common.stop_pids(self.started))


# ------------------------------------------------------------------------------ timing
def cases() -> dict[str, str]:
    return {
        "hour": "/insights?window=hour",
        "day": "/insights?window=day",
        "week": "/insights?window=week",
        "week, one project": f"/insights?window=week&project={HELLO}",
    }


def figures_shown(html: str) -> tuple[int, int]:
    """The page's total calls and failures."""
    found = [re.search(rf'data-figure="{name}">(\d+)<', html) for name in ("calls", "failures")]
    assert found[0] and found[1], html[:2000]
    return int(found[0].group(1)), int(found[1].group(1))


Shown = dict[tuple[str, str], tuple[int, int, int]]  # (server, case) -> calls, failures, bytes


def measure(
    clients: dict[str, httpx2.Client], todo: dict[str, str], repeats: int
) -> tuple[dict[tuple[str, str], list[float]], Shown]:
    """Per (server, case): the seconds of each measured request; and the calls and failures
    the page showed and its size in bytes (of the last request)."""
    keys = [(server, case) for case in todo for server in clients]
    samples: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    shown: Shown = {}
    for r in range(WARMUP + repeats):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        if r % 2:
            order.reverse()
        for server, case in order:
            t0 = time.perf_counter()
            resp = clients[server].get(todo[case])
            elapsed = time.perf_counter() - t0
            assert resp.status_code == 200, resp.text[:500]
            shown[(server, case)] = (*figures_shown(resp.text), len(resp.content))
            if r >= WARMUP:
                samples[(server, case)].append(elapsed)
    return samples, shown


def naive(db: Path, since_s: int) -> tuple[dict[str, float], tuple[int, int]]:
    """Median seconds of the week's aggregates straight over the runs table (sqlite3, rows
    fetched); and the calls and failures they count."""
    since = datetime.fromtimestamp(since_s, UTC).strftime(STAMP)
    duration = "(julianday(finished_at) - julianday(created_at)) * 86400000.0"
    runs = f"SELECT *, {duration} AS dur FROM runs WHERE finished_at >= ? AND status IN {FINAL}"
    per_tool = (
        "SELECT project_id, entrypoint_id, count(*), sum(status IN ('failed', 'timeout')), sum(dur) "
        f"FROM ({runs}) GROUP BY 1, 2"
    )
    buckets = ", ".join(f"sum(dur <= {b})" for b in DURATION_BOUNDS_MS)
    point = "CAST(strftime('%s', finished_at) AS INTEGER) / 14400"
    per_point = (
        f"SELECT project_id, entrypoint_id, {point}, max(entrypoint_title), count(*), "
        f"sum(status IN ('failed', 'timeout')), sum(dur), {buckets} FROM ({runs}) GROUP BY 1, 2, 3"
    )
    queries = {
        "per tool: count, failures, duration sum": per_tool,
        "per tool per 4 h point, + duration buckets": per_point,
    }
    times: dict[str, list[float]] = {label: [] for label in queries}
    totals = (0, 0)
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        for _ in range(NAIVE_REPEATS):
            for label, sql in queries.items():
                t0 = time.perf_counter()
                rows = conn.execute(sql, (since,)).fetchall()
                times[label].append(time.perf_counter() - t0)
                assert rows
                if sql is per_tool:
                    totals = (sum(r[2] for r in rows), sum(r[3] for r in rows))
    return {label: _common.percentile(got, 50) for label, got in times.items()}, totals


# ------------------------------------------------------------------------------ report
def report_store(s: Store) -> None:
    minute, half = s.rollups.get(60, (0, 0)), s.rollups.get(1800, (0, 0))
    rate = f" ({s.runs / s.fill_s:,.0f} runs/s)" if s.fill_s > 0 and s.runs else ""
    print(
        f"{s.label}: {s.runs:,} runs written in {s.fill_s:.1f} s{rate}; "
        f"upgrade {BEFORE_ROLLUPS} -> head {s.upgrade_s:.2f} s"
        + (f" (backfill {s.runs / s.upgrade_s:,.0f} runs/s)" if s.runs else "")
    )
    print(
        f"  rollups: {minute[0]:,} minute rows ({minute[1]:,} calls, the last 2 days), "
        f"{half[0]:,} half-hour rows ({half[1]:,} calls, the last 8 days); database {s.size_mib:,.0f} MiB"
    )


def report(
    samples: dict[tuple[str, str], list[float]],
    shown: Shown,
    big: str,
    base: str,
    todo: dict[str, str],
) -> dict[str, float]:
    n = len(samples[(big, "hour")])
    print(f"\nGET /insights, client wall time, {n} per case after {WARMUP} warm-up, interleaved, ms:")
    print(f"big: the store with {big}, base: the store with {base}; calls shown: big / base")
    heads = ("big p50", "big p99", "big max", "base p50", "base p99", "p50 ratio", "p99 ratio")
    print(f"{'window':18s}" + "".join(f"{h:>13s}" for h in heads) + "  calls shown         p99 <= 300 ms")
    p50s: dict[str, float] = {}
    for case in todo:
        a, b = samples[(big, case)], samples[(base, case)]
        a50, a99, b50, b99 = (_common.percentile(x, q) for x in (a, b) for q in (50, 99))
        p50s[case] = a50
        cells = [a50, a99, max(a), b50, b99]
        verdict = "met" if a99 <= TARGET else "NOT MET"
        calls = f"{shown[(big, case)][0]:>9,} / {shown[(base, case)][0]:,}"
        print(
            f"{case:18s}"
            + "".join(f"{c * 1000:13.2f}" for c in cells)
            + f"{_common.ratio(a50, b50):>13s}{_common.ratio(a99, b99):>13s}  {calls:18s}  {verdict}"
        )
    sizes = ", ".join(f"{case} {shown[(big, case)][2] / 1024:.0f} KiB" for case in todo)
    print(f"page sizes ({big}): {sizes}")
    return p50s


# ------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs in the store (default 1,000,000)")
    parser.add_argument(
        "--baseline-runs", type=int, default=1000, help="runs in the baseline store (default 1,000; 0: empty)"
    )
    parser.add_argument("--repeats", type=int, default=30, help="measured requests per case (default 30)")
    args = parser.parse_args()
    if not 1000 <= args.runs <= 5_000_000 or not 0 <= args.baseline_runs <= 100_000:
        parser.error("--runs 1000..5000000, --baseline-runs 0..100000")
    if not 5 <= args.repeats <= 1000:
        parser.error("--repeats 5..1000")
    print(_common.machine_line())
    tmp = Path(tempfile.mkdtemp(prefix="shbench-insights-"))
    servers: list[Server] = []
    try:
        projects = tmp / "projects"
        shutil.copytree(ROOT / "examples" / "hello", projects / "hello")
        big_label, base_label = f"{args.runs:,} runs", f"{args.baseline_runs:,} runs"
        print(f"filling the stores ({args.runs:,} and {args.baseline_runs:,} runs) …", file=sys.stderr)
        big = make_store(big_label, tmp / "big", args.runs, projects)
        base = make_store(base_label, tmp / "base", args.baseline_runs, projects)
        report_store(big)
        report_store(base)
        servers = [Server(big, tmp), Server(base, tmp)]
        for server in servers:
            server.wait_ready()
        clients = {s.store.label: httpx2.Client(base_url=s.url, timeout=60) for s in servers}
        try:
            for client in clients.values():
                _common.log_in(client)
            todo = cases()
            samples, shown = measure(clients, todo, args.repeats)
        finally:
            for client in clients.values():
                client.close()
        p50s = report(samples, shown, big_label, base_label, todo)
        since = window_since(WINDOWS["week"], int(time.time()))
        print(
            f"\nthe naive week query over the runs table ({big_label}; sqlite3, median of {NAIVE_REPEATS}):"
        )
        took, (calls, failures) = naive(big.db, since)
        for label, seconds in took.items():
            print(
                f"  {label:44s} {_common.ms(seconds)}  = {_common.ratio(seconds, p50s['week'])} "
                "the week page p50"
            )
        page_calls, page_failures, _ = shown[(big_label, "week")]
        same = "the same" if (calls, failures) == (page_calls, page_failures) else "DIFFERENT"
        print(
            f"  runs that ended since {datetime.fromtimestamp(since, UTC):%a %H:%M} UTC: {calls:,} calls, "
            f"{failures:,} failures; the week page showed {page_calls:,} and {page_failures:,}: {same}"
        )
        for server in servers:
            if "Traceback" in server.log():
                print(f"note: the {server.store.label} server logged a traceback:\n{server.log()[-3000:]}")
    finally:
        for server in servers:
            server.stop()
        stopped = _common.stop_pids(_common.descendants())
        _common.report_leftovers("insights", stopped)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
