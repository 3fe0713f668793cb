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
  POST a 300 MB JSON body to /api/interactions/x/answer (streamed, never built in memory);
- held: the probe, and a `GET /healthz` probe, while 8 runs wait on unanswered questions
  (examples/interactive `plan_trip`, started by 2026-07-28 `tools/call`s that end with an
  input request) and 60 sockets hold a request head announcing `Content-Length: 100` and
  never send the body (half on the MCP endpoint with the API key, half on the login form);
  a socket the server answers or closes is opened again, and counted. Its baseline is a
  quiet series of both probes taken just before.

A probe that gets no answer within --timeout seconds counts as a timeout: it enters the
percentiles at the timeout and is reported; a phase ends after --phase-seconds whatever
is left. Goals: probe p99 during the flood <= 3x quiet; ping and healthz p99 while held
<= 3x quiet; RSS growth during the bodies <= 32 MiB.
Run: `python bench/hostile.py [--probes N] [--body-mb N] [--only flood,lock,bodies,held]`
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import _common
import httpx2

ROOT = Path(__file__).resolve().parent.parent
HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
INTERACTIVE = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
MODERN = "2026-07-28"
REOPEN = 0.25  # seconds before a held socket the server ended is opened again
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}
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
        for name, project_id in (("hello", HELLO), ("interactive", INTERACTIVE)):
            shutil.copytree(ROOT / "examples" / name, projects / name)
            self.cli("projects", "add", str(projects / name))
            self.cli("projects", "publish", project_id)
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
        deadline = time.monotonic() + 90  # a loaded machine starts it slowly
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)  # polling a port that is not listening yet, bounded
        self.stop()
        raise SystemExit("server did not start within 90 s")

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
        started = _common.descendants()  # the server, its zygote and any worker, by PID
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        _common.report_leftovers("hostile.py", _common.stop_pids(started))


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
    """Sequential probes with a bound each: an MCP `ping` on one 2025-11-25 session, or
    `GET /healthz`. A probe that is not answered in time counts as a timeout (its sample is
    the timeout); any other failure is counted by its status."""

    def __init__(self, server: Server, timeout: float) -> None:
        self.url = f"{server.url}/api/workflows/{HELLO}/mcp?target=latest"
        self.health_url = f"{server.url}/healthz"
        self.key = server.key
        self.timeout = timeout
        self.http = httpx2.Client(timeout=timeout)
        self.health = httpx2.Client(timeout=timeout)
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
        self.failures: Counter[str] = Counter()

    def _timed(self, send: Callable[[], httpx2.Response]) -> float:
        t0 = time.perf_counter()
        try:
            r = send()
        except httpx2.TimeoutException:
            self.failures["timeout"] += 1
            return self.timeout
        except httpx2.HTTPError as exc:
            self.failures[type(exc).__name__] += 1
            return time.perf_counter() - t0
        elapsed = time.perf_counter() - t0
        if r.status_code != 200:
            self.failures[str(r.status_code)] += 1
        return elapsed

    def once(self) -> float:
        body = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        return self._timed(
            lambda: self.http.post(self.url, headers=mcp_headers(self.key, self.sid), json=body)
        )

    def healthz(self) -> float:
        return self._timed(lambda: self.health.get(self.health_url))

    def series(
        self, n: int, deadline: float | None = None, probe: Callable[[], float] | None = None
    ) -> list[float]:
        """Up to n probes, fewer if the phase's deadline (time.monotonic) passes first."""
        probe = probe or self.once
        samples: list[float] = []
        while len(samples) < n and (deadline is None or time.monotonic() < deadline):
            samples.append(probe())
        return samples

    def take_failures(self) -> dict[str, int]:
        failures, self.failures = dict(self.failures), Counter()
        return failures


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


def modern_call(server: Server, project_id: str, tool: str, arguments: dict[str, object]) -> dict:
    """One 2026-07-28 `tools/call` (no session, no initialize): its JSON-RPC response."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": MODERN_META},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "Authorization": f"Bearer {server.key}",
    }
    r = httpx2.post(f"{server.url}/api/workflows/{project_id}/mcp", json=body, headers=headers, timeout=60)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return r.json()


def unanswered_questions(server: Server, count: int) -> list[str]:
    """`count` runs of plan_trip, each left waiting on its first question (nobody answers:
    the round's request state is dropped); the questions' interaction ids."""
    questions = []
    for i in range(count):
        answer = modern_call(server, INTERACTIVE, "plan_trip", {"traveller": f"bench {i}"})
        result = answer.get("result") or {}
        if result.get("resultType") != "input_required" or not result.get("inputRequests"):
            raise SystemExit(f"plan_trip did not stop at a question: {json.dumps(answer)[:300]}")
        questions += list(result["inputRequests"])
    return questions


@dataclass
class Held:
    opened: int = 0
    closed_by_server: int = 0
    answers: Counter[str] = field(default_factory=Counter)  # status lines the server sent


@contextlib.contextmanager
def held_sockets(server: Server, count: int) -> Iterator[Held]:
    """`count` sockets, each holding a request head with `Content-Length: 100` and no body:
    half on the MCP endpoint with the API key, half on the login form (no credential). Neither
    is a failed credential, so the address's bearer throttle (which the probes share) stays
    out of it. A socket the server answers or closes is opened again a moment later (REOPEN);
    the stats count both."""
    stop = threading.Event()
    stats = Held()
    host = f"Host: 127.0.0.1:{server.port}\r\n"
    heads = [
        (
            f"POST /api/workflows/{HELLO}/mcp?target=latest HTTP/1.1\r\n{host}"
            f"Authorization: Bearer {server.key}\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Type: application/json\r\nMCP-Protocol-Version: {PV}\r\nContent-Length: 100\r\n\r\n"
        ).encode(),
        (
            f"POST /login HTTP/1.1\r\n{host}"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
        ).encode(),
    ]
    socks: dict[socket.socket, int] = {}
    due: dict[int, float] = {}  # slot -> when to open it again

    def open_one(i: int) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(heads[i % 2])
        except OSError:
            due[i] = time.monotonic() + REOPEN
            return
        s.setblocking(False)
        socks[s] = i
        stats.opened += 1

    for i in range(count):
        open_one(i)

    def watch() -> None:
        while not stop.is_set():
            now = time.monotonic()
            for i in [i for i, at in due.items() if at <= now]:
                del due[i]
                open_one(i)
            readable, _, _ = select.select(list(socks), [], [], 0.05)
            for s in readable:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 "):
                    stats.answers[data.split(b" ", 2)[1].decode()] += 1
                stats.closed_by_server += 1
                due[socks.pop(s)] = time.monotonic() + REOPEN
                s.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield stats
    finally:
        stop.set()
        watcher.join(timeout=10)
        for s in list(socks):
            s.close()


def summary(
    name: str, samples: list[float], quiet: list[float], failures: dict[str, int] | None = None
) -> None:
    p50, p99 = _common.percentile(samples, 50), _common.percentile(samples, 99)
    q50, q99 = _common.percentile(quiet, 50), _common.percentile(quiet, 99)
    failed = f"   failed: {json.dumps(failures)}" if failures else ""
    print(
        f"  {name:<7} p50 {_common.ms(p50)} ({_common.ratio(p50, q50)} quiet)   "
        f"p99 {_common.ms(p99)} ({_common.ratio(p99, q99)} quiet)   n={len(samples)}{failed}"
    )


SCENARIOS = ("flood", "lock", "bodies", "held")


def held_scenario(server: Server, probe: Probe, args: argparse.Namespace) -> None:
    """Ping and healthz, quiet and then with `--questions` runs waiting on unanswered
    questions and `--held-sockets` body-less request heads held open."""

    def phase() -> float:
        return time.monotonic() + args.phase_seconds

    probe.series(30, phase(), probe.healthz)  # warm-up of the second connection
    quiet_ping = probe.series(args.probes, phase())
    quiet_ping_failed = probe.take_failures()
    quiet_health = probe.series(args.probes, phase(), probe.healthz)
    quiet_health_failed = probe.take_failures()
    questions = unanswered_questions(server, args.questions)
    with held_sockets(server, args.held_sockets) as held:
        ping = probe.series(args.probes, phase())
        ping_failed = probe.take_failures()
        health = probe.series(args.probes, phase(), probe.healthz)
        health_failed = probe.take_failures()
    print(
        f"{len(questions)} unanswered questions + {args.held_sockets} sockets holding a body-less "
        f"`Content-Length: 100` head; {args.probes} probes per series, timeout {args.timeout:g} s "
        "(goal: p99 <= 3x quiet)"
    )
    summary("ping q", quiet_ping, quiet_ping, quiet_ping_failed)
    summary("ping", ping, quiet_ping, ping_failed)
    summary("healthz q", quiet_health, quiet_health, quiet_health_failed)
    summary("healthz", health, quiet_health, health_failed)
    print(
        f"  sockets: {held.opened} opened, {held.closed_by_server} closed by the server "
        f"(answers {json.dumps(dict(sorted(held.answers.items())))}) and opened again"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--body-mb", type=int, default=300)
    parser.add_argument("--questions", type=int, default=8, help="runs left waiting (held)")
    parser.add_argument("--held-sockets", type=int, default=60, help="body-less heads held (held)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds a probe may take")
    parser.add_argument("--phase-seconds", type=float, default=90.0, help="bound on each probe series")
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"a subset of {','.join(SCENARIOS)}")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(SCENARIOS):
        parser.error(f"--only: unknown scenario {sorted(only - set(SCENARIOS))}")
    print(_common.machine_line())
    with tempfile.TemporaryDirectory(prefix="sh-hostile-") as tmp:
        server = Server(Path(tmp))
        try:
            probe = Probe(server, args.timeout)

            def phase() -> float:
                return time.monotonic() + args.phase_seconds

            probe.series(30)  # warm-up
            if only & {"flood", "lock"}:
                quiet = probe.series(args.probes, phase())
                quiet_failed = probe.take_failures()
                print(f"authenticated MCP ping, {args.probes} sequential probes per phase")
                summary("quiet", quiet, quiet, quiet_failed)
                if "flood" in only:
                    with login_flood(server) as statuses:
                        flood = probe.series(args.probes, phase())
                    summary("flood", flood, quiet, probe.take_failures())
                    print(f"  login flood answers: {json.dumps(dict(sorted(statuses.items())))}")
                if "lock" in only:
                    with held_write_lock(server):
                        lock_samples = probe.series(args.probes, phase())
                    summary("lock", lock_samples, quiet, probe.take_failures())
                summary("quiet2", probe.series(args.probes, phase()), quiet, probe.take_failures())
            if "bodies" in only:
                before, peak, codes = big_bodies(server, args.body_mb)
                growth = (peak - before) / 1024
                print(
                    f"2 x {args.body_mb} MB unauthenticated bodies: statuses {codes}, RSS {before / 1024:.1f}"
                    f" -> peak {peak / 1024:.1f} MiB (growth {growth:.1f} MiB; goal <= 32)"
                )
            if "held" in only:  # last: its runs keep waiting until the server stops
                held_scenario(server, probe, args)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
