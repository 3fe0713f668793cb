"""Hostile traffic: what a stranger can do to the latency and memory of a real server.

One real `steamharness serve` on a free loopback port (fresh data dir, generated admin key,
examples/hello published, an account with a password and an API key). An MCP session is
opened once; the probe is an authenticated JSON-RPC `ping` on it, sent sequentially.

- quiet: probe p50/p99 with nothing else going on (the baseline of every ratio below);
- flood: the same probe while 16 threads send wrong-password logins as fast as they can
  (a fresh login form each time, as a browser would); also counts how they were answered;
- lock: the same probe while this process holds the SQLite write lock (BEGIN IMMEDIATE on
  a second connection), i.e. another process is writing for a long time;
- bodies: the server's VmRSS, sampled every 5 ms, while two unauthenticated clients each
  POST a 300 MB JSON body to /api/interactions/x/answer (streamed, never built in memory).

Goals: probe p99 during the flood <= 3x quiet; RSS growth during the bodies <= 32 MiB.
Run: `python bench/hostile.py [--probes N] [--body-mb N]`
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
from collections.abc import Iterator
from pathlib import Path

import _common
import httpx2

ROOT = Path(__file__).resolve().parent.parent
HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
STEAMHARNESS = str(Path(sys.executable).parent / "steamharness")
PV = "2025-11-25"
PASSWORD = "a long enough password for the bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, base: Path) -> None:
        self.data = base / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        admin = secrets.token_urlsafe(32)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
        self.env["STEAMHARNESS_SERVER_ADMIN_KEY"] = admin
        projects = base / "projects"
        shutil.copytree(ROOT / "examples" / "hello", projects / "hello")
        self.cli("projects", "add", str(projects / "hello"))
        self.cli("projects", "publish", HELLO)
        self.cli("users", "create", "alice", "--password-stdin", stdin=PASSWORD + "\n")
        self.cli("users", "grant", "alice", "--all")
        self.key = self.cli("keys", "create", "--user", "alice").strip()
        self.log = (base / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [STEAMHARNESS, "serve", "--port", str(self.port), "--data-dir", str(self.data)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)  # polling a port that is not listening yet, bounded
        raise SystemExit("server did not start")

    def cli(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [STEAMHARNESS, *args, "--data-dir", str(self.data)],
            capture_output=True,
            text=True,
            env=self.env,
            input=stdin,
            timeout=60,
            check=True,
        )
        return done.stdout

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


def mcp_headers(key: str, sid: str | None = None) -> dict[str, str]:
    h = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PV,
        "Authorization": f"Bearer {key}",
    }
    if sid:
        h["Mcp-Session-Id"] = sid
    return h


class Probe:
    def __init__(self, server: Server) -> None:
        self.url = f"{server.url}/api/workflows/{HELLO}/mcp?target=latest"
        self.key = server.key
        self.http = httpx2.Client(timeout=60)
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": PV,
                "capabilities": {},
                "clientInfo": {"name": "b", "version": "1"},
            },
        }
        r = self.http.post(self.url, headers=mcp_headers(self.key), json=init)
        self.sid = r.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.http.post(self.url, headers=mcp_headers(self.key, self.sid), json=note)

    def once(self) -> float:
        body = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        t0 = time.perf_counter()
        r = self.http.post(self.url, headers=mcp_headers(self.key, self.sid), json=body)
        elapsed = time.perf_counter() - t0
        if r.status_code != 200:
            raise SystemExit(f"probe failed: {r.status_code} {r.text[:200]}")
        return elapsed

    def series(self, n: int) -> list[float]:
        return [self.once() for _ in range(n)]


@contextlib.contextmanager
def login_flood(server: Server, threads: int = 16) -> Iterator[dict[int, int]]:
    stop = threading.Event()
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def attacker() -> None:
        with httpx2.Client(base_url=server.url, timeout=60) as http:
            while not stop.is_set():
                form = http.get("/login")
                if form.status_code != 200:
                    status = form.status_code
                else:
                    token = form.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
                    data = {"username": "alice", "password": "wrong", "csrf_token": token}
                    status = http.post("/login", data=data).status_code
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1

    workers = [threading.Thread(target=attacker, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        while sum(statuses.values()) < threads:  # every attacker is under way
            time.sleep(0.01)
        yield statuses
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=60)


@contextlib.contextmanager
def held_write_lock(server: Server) -> Iterator[None]:
    conn = sqlite3.connect(server.data / "steamharness.sqlite3", isolation_level=None, timeout=10)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def big_bodies(server: Server, megabytes: int) -> tuple[int, int, list[int]]:
    """(RSS before KiB, peak RSS KiB, statuses) while two clients send huge bodies."""
    chunk = b" " * (1024 * 1024)
    statuses: list[int] = []

    def body() -> Iterator[bytes]:
        yield b'{"action": "accept", "content": {"x": "'
        for _ in range(megabytes):
            yield chunk
        yield b'"}}'

    def send() -> None:
        try:
            r = httpx2.post(
                f"{server.url}/api/interactions/int_0000000000000000/answer",
                content=body(),
                headers={"Content-Type": "application/json"},
                timeout=120,
            )
            statuses.append(r.status_code)
        except httpx2.HTTPError as exc:  # the server may close the connection on a refusal
            statuses.append(-1)
            print(f"  (client saw {type(exc).__name__})")

    before = server.rss_kib()
    peak = before
    senders = [threading.Thread(target=send) for _ in range(2)]
    for s in senders:
        s.start()
    while any(s.is_alive() for s in senders):
        peak = max(peak, server.rss_kib())
        time.sleep(0.005)  # the sampling interval
    return before, peak, statuses


def summary(name: str, samples: list[float], quiet: list[float]) -> None:
    p50, p99 = _common.percentile(samples, 50), _common.percentile(samples, 99)
    q50, q99 = _common.percentile(quiet, 50), _common.percentile(quiet, 99)
    print(
        f"  {name:<6} p50 {_common.ms(p50)} ({_common.ratio(p50, q50)} quiet)   "
        f"p99 {_common.ms(p99)} ({_common.ratio(p99, q99)} quiet)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--body-mb", type=int, default=300)
    args = parser.parse_args()
    print(_common.machine_line())
    with tempfile.TemporaryDirectory(prefix="sh-hostile-") as tmp:
        server = Server(Path(tmp))
        try:
            probe = Probe(server)
            probe.series(30)  # warm-up
            quiet = probe.series(args.probes)
            with login_flood(server) as statuses:
                flood = probe.series(args.probes)
            lock_samples: list[float] = []
            with held_write_lock(server):
                lock_samples = probe.series(args.probes)
            quiet_after = probe.series(args.probes)
            print(f"authenticated MCP ping, {args.probes} sequential probes per phase")
            summary("quiet", quiet, quiet)
            summary("flood", flood, quiet)
            summary("lock", lock_samples, quiet)
            summary("quiet2", quiet_after, quiet)
            print(f"  login flood answers: {json.dumps(dict(sorted(statuses.items())))}")
            before, peak, codes = big_bodies(server, args.body_mb)
            growth = (peak - before) / 1024
            print(
                f"2 x {args.body_mb} MB unauthenticated bodies: statuses {codes}, RSS {before / 1024:.1f}"
                f" -> peak {peak / 1024:.1f} MiB (growth {growth:.1f} MiB; goal <= 32)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
