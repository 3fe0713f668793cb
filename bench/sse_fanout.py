"""SSE fan-out: one audit event delivered to 500 live audit tails, hub -> SSE -> client.

A real server process (this file with `--serve`: `create_app(settings)` under uvicorn with
the settings `steamharness serve` uses, plus a few bench-only routes) on a free loopback
port, with a fresh data dir and an admin account. This process logs in once and opens 500
connections to `GET /admin/audit/tail?event=bench.fanout&after=<newest id>` with the login
cookie: plain asyncio sockets speaking HTTP/1.1, so the client adds as little as possible.
Once the server's `EventHub` reports every subscriber, each round asks the server to write
one audit event through the `AuditLog` (committed) and publish it on the hub (topic `audit`,
`id` of the row), and every socket records when the SSE event carrying that row id arrives.

Latency = arrival (this process, `time.monotonic()`) - the server's `time.monotonic()` just
before `hub.publish` (CLOCK_MONOTONIC is one clock for the whole machine on Linux): the hub
wakes the tails, the shared feed reads the new row once and renders it once, each tail
filters it and sends its SSE event, the kernel carries it, the client reads it. Also shown:
from the start of the request that writes the event (adds the insert and commit).

Same-run baseline (`bare`): 500 more connections to a bench route that subscribes to the
same hub and sends a fixed payload of the same size as an audit row straight through
`EventSourceResponse`: no store read, no rendering, no filter. Rounds alternate A B B A.
At the end all sockets are closed and the script waits until the hub has no subscribers
(every stream unsubscribed on disconnect). Target: audit tail p99 <= 250 ms.

Run: `python bench/sse_fanout.py [--subscribers N] [--rounds N]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import _common
import anyio
import httpx2
import uvicorn
from fastapi import Request
from sqlmodel import Session
from sse_starlette import EventSourceResponse, ServerSentEvent

from webui.admin import create_user
from webui.app import create_app
from webui.settings import Settings
from webui.store import audit as audit_store
from webui.store.db import make_engine
from webui.web.audit_pages import TOPIC

HERE = Path(__file__).resolve()
EVENT = "bench.fanout"
BARE_TOPIC = "bench-bare"
TARGET_P99 = 0.250
ROUND_TIMEOUT = 20.0
START_TIMEOUT = 60.0
WARMUP_ROUNDS = 3
IDLE_SECONDS = 5.0
ID_LINE = re.compile(rb"(?:^|\n)id: (\d+)\r?\n")
BARE_PAYLOAD = "<tr>" + "x" * 900 + "</tr>"  # about the size of a rendered audit row
BARE_IDS = 10_000_000  # bare round ids start here, far from audit row ids


class FullCollections:
    """Generation-2 garbage collections in this process: how many, and the longest."""

    def __init__(self) -> None:
        self.count = 0
        self.longest = 0.0
        self._start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count += 1
            self.longest = max(self.longest, time.perf_counter() - self._start)


# ------------------------------------------------------------------------------ server side
def serve(port: int, data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir)
    app = create_app(settings)
    collections = FullCollections()

    async def publish(request: Request) -> dict[str, float | int]:
        services = request.app.state.services
        started = time.monotonic()

        def write() -> int:
            with Session(services.engine) as s:
                services.audit.record(s, EVENT, actor="user:bench", outcome="ok", source="bench")
                s.commit()
            return audit_store.max_id(services.engine)  # the only writer while the bench runs

        row_id = await anyio.to_thread.run_sync(write)
        published = time.monotonic()
        services.hub.publish(TOPIC, "recorded", id=row_id)
        return {"id": row_id, "request": started, "published": published}

    async def publish_bare(request: Request, n: int) -> dict[str, float | int]:
        published = time.monotonic()
        request.app.state.services.hub.publish(BARE_TOPIC, "tick", n=n)
        return {"id": n, "request": published, "published": published}

    async def bare(request: Request) -> EventSourceResponse:
        hub = request.app.state.services.hub

        async def events() -> AsyncIterator[ServerSentEvent]:
            with hub.subscribe(BARE_TOPIC) as sub:
                async for event in sub:
                    yield ServerSentEvent(data=BARE_PAYLOAD, event="bare", id=str(event.data["n"]))

        return EventSourceResponse(events(), send_timeout=10)

    async def subscribers(request: Request) -> dict[str, int]:
        return {"count": request.app.state.services.hub.subscriber_count}

    async def full_gc() -> dict[str, float]:
        return {"count": collections.count, "longest": collections.longest}

    async def freeze() -> dict[str, int]:
        gc.collect()
        gc.freeze()
        return {"frozen": gc.get_freeze_count()}

    app.add_api_route("/bench/gc", full_gc, methods=["GET"])
    app.add_api_route("/bench/freeze", freeze, methods=["POST"])
    app.add_api_route("/bench/publish", publish, methods=["POST"])
    app.add_api_route("/bench/publish-bare", publish_bare, methods=["POST"])
    app.add_api_route("/bench/bare", bare, methods=["GET"])
    app.add_api_route("/bench/subscribers", subscribers, methods=["GET"])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
        log_level="info",
    )


# ------------------------------------------------------------------------------ client side
@dataclass
class Group:
    """One set of subscribers; arrival times are kept per SSE id, so an event that arrives
    before the publish request has answered is still counted."""

    label: str
    path: str
    publish: str
    expected: int
    arrivals: dict[int, list[float]] = field(default_factory=dict)
    complete: dict[int, asyncio.Event] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # from hub.publish
    from_request: list[float] = field(default_factory=list)
    round_p99: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    missing: int = 0

    def arrived(self, ident: int, at: float) -> None:
        times = self.arrivals.setdefault(ident, [])
        times.append(at)
        if len(times) == self.expected:
            self.complete.setdefault(ident, asyncio.Event()).set()


async def subscriber(port: int, path: str, cookie: str, group: Group, opened: asyncio.Queue[bool]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
            "Accept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
        )
        writer.write(request.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        ok = head.startswith(b"HTTP/1.1 200")
        await opened.put(ok)
        if not ok:
            return
        pending = b""
        while chunk := await reader.read(65536):
            at = time.monotonic()
            pending += chunk
            end = 0
            for match in ID_LINE.finditer(pending):
                group.arrived(int(match.group(1)), at)
                end = match.end()
            pending = pending[end:][-4096:]
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def tcp_counters() -> dict[str, int]:
    """Machine-wide TCP retransmissions (Linux /proc): a late delivery that coincides with one
    is the kernel's doing (a dropped loopback segment waits for the retransmission timer)."""
    wanted = {"RetransSegs", "TCPLossProbes", "TCPTimeouts"}
    found: dict[str, int] = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        with open(path, encoding="ascii") as fh:
            lines = fh.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            for name, value in zip(names.split()[1:], values.split()[1:], strict=False):
                if name in wanted:
                    found[name] = int(value)
    return found


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_round(client: httpx2.AsyncClient, group: Group, n: int, pid: int, keep: bool) -> None:
    cpu0 = cpu_seconds(pid)
    r = await client.post(group.publish, params={"n": n} if group.label == "bare" else {})
    r.raise_for_status()
    answer = r.json()
    ident = int(answer["id"])  # the SSE id: the audit row id, or n for the bare route
    done = group.complete.setdefault(ident, asyncio.Event())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), ROUND_TIMEOUT)
    cpu = cpu_seconds(pid) - cpu0
    arrivals = group.arrivals.pop(ident, [])
    if not keep:
        return
    group.missing += group.expected - len(arrivals)
    latencies = [a - answer["published"] for a in arrivals]
    group.latencies += latencies
    group.from_request += [a - answer["request"] for a in arrivals]
    if latencies:
        group.round_p99.append(_common.percentile(latencies, 99))
    group.server_cpu.append(cpu)


def login_cookie(base: str) -> str:
    with httpx2.Client(base_url=base, timeout=30) as client:
        _common.log_in(client)
        return "; ".join(f"{k}={v}" for k, v in client.cookies.items())


async def wait_for_subscribers(client: httpx2.AsyncClient, count: int) -> float:
    t0 = time.monotonic()
    while True:
        got = (await client.get("/bench/subscribers")).json()["count"]
        if got == count:
            return time.monotonic() - t0
        if time.monotonic() - t0 > START_TIMEOUT:
            raise SystemExit(f"the hub has {got} subscribers, expected {count}")
        await asyncio.sleep(0.05)  # polling the server's own count, bounded by the deadline


async def run(port: int, pid: int, subscribers: int, rounds: int, freeze: bool) -> list[Group]:
    base = f"http://127.0.0.1:{port}"
    cookie = login_cookie(base)
    async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
        if freeze:
            frozen = (await client.post("/bench/freeze")).json()["frozen"]
            print(f"server gc.freeze(): {frozen:,} objects moved to the permanent generation")
        page = await client.get("/admin/audit", headers={"Cookie": cookie})
        newest = re.search(r"after=(\d+)", page.text)
        after = newest.group(1) if newest else "0"
        query = urlencode({"event": EVENT, "after": after})
        tail = Group("audit tail", f"/admin/audit/tail?{query}", "/bench/publish", subscribers)
        bare = Group("bare", "/bench/bare", "/bench/publish-bare", subscribers)
        opened: asyncio.Queue[bool] = asyncio.Queue()
        tasks: list[asyncio.Task[None]] = []
        t0 = time.monotonic()
        for group in (tail, bare):
            for _ in range(subscribers):
                tasks.append(asyncio.create_task(subscriber(port, group.path, cookie, group, opened)))
        oks = [await opened.get() for _ in tasks]
        if not all(oks):
            raise SystemExit(f"{oks.count(False)} subscriptions were refused")
        ready = await wait_for_subscribers(client, 2 * subscribers)
        print(
            f"{2 * subscribers} streams open and subscribed in {time.monotonic() - t0:.2f} s "
            f"(hub count reached {ready:.2f} s after the last response head)"
        )
        cpu0, wall0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(IDLE_SECONDS)  # measuring the idle cost of the open streams
        idle = (cpu_seconds(pid) - cpu0) / (time.monotonic() - wall0)
        streams = 2 * subscribers
        print(f"server CPU while {streams} streams sit idle for {IDLE_SECONDS:.0f} s: {idle:.1%} of a core")
        tcp0 = tcp_counters()
        mine = FullCollections()
        server_gc0 = (await client.get("/bench/gc")).json()
        plan = [tail, bare] * WARMUP_ROUNDS + ([tail, bare, bare, tail] * rounds)[: 2 * rounds]
        for i, group in enumerate(plan):
            await one_round(client, group, BARE_IDS + i, pid, keep=i >= 2 * WARMUP_ROUNDS)
        tcp = {k: v - tcp0.get(k, 0) for k, v in tcp_counters().items()}
        print(
            "TCP during the rounds (whole machine): " + ", ".join(f"{k} +{v}" for k, v in sorted(tcp.items()))
        )
        server_gc = (await client.get("/bench/gc")).json()
        count = server_gc["count"] - server_gc0["count"]
        print(
            f"full (generation-2) collections during the rounds: server {count:.0f} "
            f"(longest {server_gc['longest'] * 1000:.0f} ms), client {mine.count} "
            f"(longest {mine.longest * 1000:.0f} ms)"
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        gone = await wait_for_subscribers(client, 0)
        print(f"all streams closed: the hub had 0 subscribers {gone:.2f} s later")
    return [tail, bare]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    log = (tmp / "server.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, str(HERE), "--serve", "--port", str(port), "--data-dir", str(tmp / "data")],
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                "the server exited at start-up:\n" + (tmp / "server.log").read_text(encoding="utf-8")
            )
        with contextlib.suppress(httpx2.HTTPError):
            if httpx2.get(f"http://127.0.0.1:{port}/bench/subscribers", timeout=1).status_code == 200:
                return proc
        time.sleep(0.05)  # the port is not listening yet; bounded by the deadline
    raise SystemExit("the server did not answer in time")


def report(groups: list[Group], subscribers: int) -> None:
    tail, bare = groups
    print(f"\ndelivery of one event to {subscribers} subscribers, {len(tail.round_p99)} rounds each, ms:")
    heads = ("p50", "p99", "max", "round p99 (median)", "server CPU/round")
    print(f"{'':12s} {heads[0]:>10s} {heads[1]:>10s} {heads[2]:>10s} {heads[3]:>19s} {heads[4]:>17s}")
    for g in groups:
        if not g.latencies:
            print(f"{g.label:12s} no deliveries")
            continue
        p50, p99 = _common.percentile(g.latencies, 50), _common.percentile(g.latencies, 99)
        rp99 = _common.percentile(g.round_p99, 50)
        cpu = _common.percentile(g.server_cpu, 50)
        print(
            f"{g.label:12s} {_common.ms(p50)} {_common.ms(p99)} {_common.ms(max(g.latencies))} "
            f"{_common.ms(rp99):>19s} {_common.ms(cpu):>17s}"
        )
    if tail.from_request:
        p50, p99 = _common.percentile(tail.from_request, 50), _common.percentile(tail.from_request, 99)
        print(
            f"audit tail, from the start of the write request: p50 {_common.ms(p50)}, p99 {_common.ms(p99)}"
        )
    for g in groups:
        if g.missing:
            print(f"{g.label}: {g.missing} deliveries missing after {ROUND_TIMEOUT:.0f} s")
    if tail.latencies and bare.latencies:
        p99 = _common.percentile(tail.latencies, 99)
        ratio = _common.ratio(p99, _common.percentile(bare.latencies, 99))
        verdict = "met" if p99 <= TARGET_P99 and not tail.missing else "NOT MET"
        print(f"audit tail p99 {_common.ms(p99).strip()} ({ratio} bare): target <= 250 ms {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subscribers", type=int, default=500, help="per group (default 500)")
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds per group (default 20)")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() in the server after start-up (serve does not)"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.serve:
        serve(args.port, args.data_dir)
        return
    if not 1 <= args.subscribers <= 5000 or not 1 <= args.rounds <= 1000:
        parser.error("--subscribers 1..5000, --rounds 1..1000")
    if hard < 2 * args.subscribers + 100:
        parser.error(f"the open-file limit ({hard}) is too low for {args.subscribers} subscribers per group")
    print(_common.machine_line())
    tmp = Path(tempfile.mkdtemp(prefix="shbench-sse-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        engine = make_engine(Settings(data_dir=tmp / "data").resolved_database_url)
        create_user(engine, name=_common.ADMIN[0], admin=True, password=_common.ADMIN[1])
        engine.dispose()
        port = free_port()
        proc = start_server(tmp, port)
        groups = asyncio.run(run(port, proc.pid, args.subscribers, args.rounds, args.gc_freeze))
        report(groups, args.subscribers)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        stopped = _common.stop_pids(_common.descendants())
        _common.report_leftovers("sse_fanout", stopped)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
