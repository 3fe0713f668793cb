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

- attacks: `GET /healthz` p99 while each attack of the hostile-input pass runs, as a ratio to
  a quiet series taken just before it (goal <= 3x), each attack sent by --attackers threads
  again and again for the whole series:
  - regex: an argument just under the 1 MiB MCP body cap against the ordinary pattern `[a-z]+@`;
  - unique: 3,000 distinct objects in a `uniqueItems` array;
  - mcpbody: a 1 MiB MCP `tools/call` body of 60,000 small objects;
  - kbbody: a 15 MiB JSON knowledge document (`--kb-body-mb`);
  - pdf: a 1 KB PDF whose page draws a form XObject a million times, uploaded;
  - search: vector searches against an embeddings endpoint that answers after 10 s;
  - export: NDJSON exports of a knowledge base of `--kb-mb` MiB;
  - remove: the removal of that knowledge base's collection (one series while it runs).

A probe that gets no answer within --timeout seconds counts as a timeout: it enters the
percentiles at the timeout and is reported; a phase ends after --phase-seconds whatever
is left. Goals: probe p99 during the flood <= 3x quiet; ping and healthz p99 while held
<= 3x quiet; RSS growth during the bodies <= 32 MiB.
Run: `python bench/hostile.py [--probes N] [--body-mb N] [--only flood,lock,bodies,held,attacks]
[--attacks regex,unique,mcpbody,kbbody,pdf,search,export,remove]`
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
ARGS = "0b6c2f7e-1d4a-4e8b-9c3f-5a7d2e1b8c40"  # the hostile-arguments project (attacks)
ARGS_PACKAGE = {
    "id": ARGS,
    "name": "hostile-args",
    "version": "1.0.0",
    "projectType": "workflow",
    "entrypoints": [
        {
            "id": "match",
            "handler": "main.py:run",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string", "pattern": "[a-z]+@"}},
                "required": ["text"],
            },
        },
        {
            "id": "unique",
            "handler": "main.py:run",
            "inputSchema": {
                "type": "object",
                "properties": {"items": {"type": "array", "uniqueItems": True}},
                "required": ["items"],
            },
        },
    ],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Embeddings:
    """An OpenAI-compatible embeddings endpoint on loopback: 8-dimensional vectors at once, or
    after `delay` seconds while `slow` is set (the slow paid API of the search attack)."""

    def __init__(self, delay: float = 10.0) -> None:
        import http.server

        self.slow = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if outer.slow.is_set():
                    time.sleep(delay)  # the endpoint's own slowness, what the attack is about
                data = [{"index": i, "embedding": [0.1 * (i % 7 + 1)] * 8} for i in range(len(body["input"]))]
                reply = json.dumps({"data": data}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                return

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1/embeddings"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.slow.clear()
        self.http.shutdown()
        self.http.server_close()


class Server:
    def __init__(self, base: Path, embeddings: Embeddings | None = None) -> None:
        self.data = base / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        admin = secrets.token_urlsafe(32)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
        self.env["STEAMHARNESS_SERVER_ADMIN_KEY"] = admin
        if embeddings is not None:
            self.env["STEAMHARNESS_EMBEDDINGS_URL"] = embeddings.url
        projects = base / "projects"
        for name, project_id in (("hello", HELLO), ("interactive", INTERACTIVE)):
            shutil.copytree(ROOT / "examples" / name, projects / name)
            self.cli("projects", "add", str(projects / name))
            self.cli("projects", "publish", project_id)
        (projects / "args").mkdir()
        (projects / "args" / "package.json").write_text(json.dumps(ARGS_PACKAGE))
        (projects / "args" / "main.py").write_text("def run(ctx):\n    return {'ok': True}\n")
        self.cli("projects", "add", str(projects / "args"))
        self.cli("projects", "publish", ARGS)
        self.cli("users", "create", "alice", "--password-stdin", stdin=PASSWORD + "\n")
        self.cli("users", "grant", "alice", "--all")
        self.key = self.cli("keys", "create", "--user", "alice").strip()
        self.cli("users", "create", "mallory", "--password-stdin", stdin=PASSWORD + "\n")
        self.cli("users", "grant", "mallory", "--all")
        self.mallory = self.cli("keys", "create", "--user", "mallory").strip()
        self.knowledge_key = self.cli(
            "keys", "create", "--user", "mallory", "--scope", "knowledge", "--scope", "runs.create"
        ).strip()
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
        tail = (base / "server.log").read_text(errors="replace")[-2000:]
        raise SystemExit(f"server did not start within 90 s; its log ends:\n{tail}")

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


SCENARIOS = ("flood", "lock", "bodies", "attacks", "held")


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


# ---------------------------------------------------------------- attacks (hostile input)

ATTACKS = ("regex", "unique", "mcpbody", "kbbody", "pdf", "search", "export", "remove")


def _mcp_post(server: Server, project: str, body: bytes | dict[str, object], tool: str) -> int:
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "Authorization": f"Bearer {server.mallory}",
    }
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx2.post(
        f"{server.url}/api/workflows/{project}/mcp", content=content, headers=headers, timeout=300
    )
    return r.status_code


def _call(tool: str, arguments: dict[str, object], project: str = ARGS) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": MODERN_META},
    }
    return json.dumps(body).encode()


class Knowledge:
    """The knowledge API of the HELLO project, as mallory's `knowledge` key."""

    def __init__(self, server: Server) -> None:
        self.base = f"{server.url}/api/workflows/{HELLO}/knowledge"
        self.headers = {"Authorization": f"Bearer {server.knowledge_key}"}

    def post(self, path: str, body: object, timeout: float = 300) -> int:
        return httpx2.post(f"{self.base}{path}", json=body, headers=self.headers, timeout=timeout).status_code

    def fill(self, collection: str, megabytes: int) -> None:
        """`megabytes` MiB of ~64 KiB documents in `collection` (words, so chunks are real)."""
        self.post("/collections", {"name": collection})
        words = " ".join(f"word{i % 997} sentence{i % 131}." for i in range(6000))[: 64 * 1024]
        for n in range(megabytes * 16):
            status = self.post(
                "/documents", {"collection": collection, "id": f"d{n}", "text": f"{n} {words}"}
            )
            if status >= 400:
                raise SystemExit(f"filling the knowledge base: HTTP {status}")


def _attack_requests(server: Server, attack: str, args: argparse.Namespace) -> Callable[[], int]:
    kb = Knowledge(server)
    if attack == "regex":
        body = _call("match", {"text": "a" * (1024 * 1024 - 4096)})  # just under the MCP body cap
        return lambda: _mcp_post(server, ARGS, body, "match")
    if attack == "unique":
        body = _call("unique", {"items": [{"k": i, "v": "xxxxxxxxxx"} for i in range(3000)]})
        return lambda: _mcp_post(server, ARGS, body, "unique")
    if attack == "mcpbody":
        call = json.loads(_call("echo", {"text": "x"}))
        call["params"]["_meta"]["filler"] = [{"a": 1} for _ in range(60_000)]
        body = json.dumps(call).encode()
        return lambda: _mcp_post(server, HELLO, body, "echo")
    if attack == "kbbody":
        text = "x" * (args.kb_body_mb * 1024 * 1024)
        return lambda: kb.post("/documents", {"collection": "bodies", "id": "big", "text": text})
    if attack == "pdf":
        sys.path.append(str(ROOT))  # tests/knowledge/files.py: the hostile PDF's builder
        from tests.knowledge.files import form_bomb_pdf

        data = form_bomb_pdf()

        def upload() -> int:
            files = {"file": ("bomb.pdf", data, "application/pdf")}
            r = httpx2.post(
                f"{kb.base}/documents",
                data={"collection": "pdfs"},
                files=files,
                headers=kb.headers,
                timeout=300,
            )
            return r.status_code

        return upload
    if attack == "search":
        return lambda: kb.post("/search", {"query": "word1 sentence2", "mode": "vector"})
    if attack == "export":

        def export() -> int:
            size = 0
            with httpx2.stream("GET", f"{kb.base}/export", headers=kb.headers, timeout=300) as r:
                for piece in r.iter_bytes():
                    size += len(piece)
            return r.status_code

        return export
    raise ValueError(attack)


@contextlib.contextmanager
def attacking(send: Callable[[], int], attackers: int) -> Iterator[Counter[str]]:
    """`attackers` threads sending the attack again and again until the block ends; the
    answers' statuses counted (a refused attack is an answer too)."""
    stop = threading.Event()
    statuses: Counter[str] = Counter()
    lock = threading.Lock()

    def attacker() -> None:
        while not stop.is_set():
            try:
                status = str(send())
            except httpx2.HTTPError as exc:
                status = type(exc).__name__
            with lock:
                statuses[status] += 1

    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(attackers)]
    for t in threads:
        t.start()
    try:
        yield statuses
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=330)


def attacks_scenario(server: Server, probe: Probe, embeddings: Embeddings, args: argparse.Namespace) -> None:
    """`/healthz` while each attack runs, against a quiet series taken right before it."""
    kb = Knowledge(server)
    kb.fill("docs", args.kb_mb)  # what search and export read
    print(
        f"GET /healthz, {args.probes} sequential probes per series, timeout {args.timeout:g} s, "
        f"{args.attackers} attacker threads (goal: p99 <= 3x quiet)"
    )
    for attack in args.attacks.split(","):
        quiet = probe.series(args.probes, time.monotonic() + args.phase_seconds, probe.healthz)
        quiet_failed = probe.take_failures()
        deadline = time.monotonic() + args.phase_seconds
        if attack == "remove":  # last: it removes what search and export read
            done: list[int] = []
            url = f"{kb.base}/collections/docs"

            def remove(done: list[int] = done, url: str = url) -> None:
                done.append(httpx2.delete(url, headers=kb.headers, timeout=600).status_code)

            remover = threading.Thread(target=remove)
            remover.start()
            samples: list[float] = []
            while remover.is_alive() and len(samples) < args.probes and time.monotonic() < deadline:
                samples.append(probe.healthz())
            remover.join(timeout=600)
            statuses = Counter(str(s) for s in done)
        else:
            send = _attack_requests(server, attack, args)
            if attack == "search":
                embeddings.slow.set()
            try:
                with attacking(send, args.attackers) as statuses:
                    samples = probe.series(args.probes, deadline, probe.healthz)
            finally:
                embeddings.slow.clear()
        summary(f"{attack} q", quiet, quiet, quiet_failed)
        summary(attack, samples or [0.0], quiet, probe.take_failures())
        print(f"  {attack} answers: {json.dumps(dict(sorted(statuses.items())))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--body-mb", type=int, default=300)
    parser.add_argument("--questions", type=int, default=8, help="runs left waiting (held)")
    parser.add_argument("--held-sockets", type=int, default=60, help="body-less heads held (held)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds a probe may take")
    parser.add_argument("--phase-seconds", type=float, default=90.0, help="bound on each probe series")
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"a subset of {','.join(SCENARIOS)}")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help=f"a subset of {','.join(ATTACKS)}")
    parser.add_argument("--attackers", type=int, default=4, help="threads sending each attack (attacks)")
    parser.add_argument("--kb-mb", type=int, default=16, help="MiB of knowledge to export and remove")
    parser.add_argument("--kb-body-mb", type=int, default=15, help="MiB of the JSON knowledge body")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(SCENARIOS):
        parser.error(f"--only: unknown scenario {sorted(only - set(SCENARIOS))}")
    if set(args.attacks.split(",")) - set(ATTACKS):
        parser.error(f"--attacks: unknown attack {sorted(set(args.attacks.split(',')) - set(ATTACKS))}")
    print(_common.machine_line())
    embeddings = Embeddings()
    with tempfile.TemporaryDirectory(prefix="sh-hostile-") as tmp:
        server = Server(Path(tmp), embeddings)
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
            if "attacks" in only:
                attacks_scenario(server, probe, embeddings, args)
            if "held" in only:  # last: its runs keep waiting until the server stops
                held_scenario(server, probe, args)
        finally:
            server.stop()
            embeddings.stop()


if __name__ == "__main__":
    main()
