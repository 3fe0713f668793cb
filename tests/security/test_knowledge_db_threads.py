"""A reader cannot take every database thread of the real app on loopback (in this process), and
a member cannot make the knowledge page read a large upload it will refuse:

- searches waiting on a slow embeddings endpoint (a small HTTP server of the test that
  answers only when the test lets it) hold no database thread: another account's tool call
  and API read are answered while two dozen wait (before, each waited inside `run_db` and a
  database session: 12 of them took every thread until the endpoint's 30 s timeout);
- an export is streamed a batch at a time: while the client reads its first bytes the
  server holds no file in its temporary folder (before, the whole export was written to a
  spool there first, every export its whole size);
- a member who is not an administrator uploading to the knowledge page is refused (403)
  before the body is read: the server answers while most of a 51 MiB body is unsent.

Each probe is bounded by PROBE seconds, a hang guard, not a speed check: the old server
answered none of them before the endpoint's 30 s timeout or the body's 30 s deadline."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx2
import pytest

from tests.e2e.server import HELLO, INTERACTIVE, LEDGER, LiveServer
from tests.e2e.test_mcp_sessions import CSRF_RE
from tests.helpers import WAIT
from tests.security.knowledge_server import OPERATOR, greet, large_collection, open_session
from tests.support import in_process_server
from webui.audit.log import AuditLog
from webui.auth.ui import COOKIE_NAME
from webui.knowledge.service import KnowledgeService
from webui.store.db import make_engine

PROBE = 15.0  # a hang guard for each probe (the old server held them 30 s or more)
SEARCHES = 24  # twice the database threads: the old server froze for two endpoint timeouts
HELD = 12  # searches waiting at the endpoint before the probe (every thread, before)
EXPORT_DOCUMENTS = 40  # ~10 MiB: past the 8 MiB the old export kept in memory before its spool
UPLOAD_BYTES = 51 * 1024 * 1024 - 1  # within the guard's cap for the page's uploads
MEMBER = ("member", "member-password-1")


class SlowEndpoint(BaseHTTPRequestHandler):
    """An embeddings endpoint that answers only once the test sets `release` (or WAIT)."""

    release = threading.Event()
    lock = threading.Lock()
    waiting: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        cls = type(self)
        with cls.lock:
            cls.waiting += 1
        try:
            cls.release.wait(WAIT)
        finally:
            with cls.lock:
                cls.waiting -= 1
        data = [{"index": i, "embedding": [1.0, 0.5, 0.25, 0.125]} for i in range(len(body["input"]))]
        raw = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowEndpoint)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/embeddings"
    finally:
        SlowEndpoint.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def spool_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server-tmp")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, endpoint: str, spool_dir: Path) -> Iterator[LiveServer]:
    env = {
        "STEAMHARNESS_EMBEDDINGS_URL": endpoint,
        # A quarter of these an account: the reader's 24 searches put 16 in flight at once.
        "STEAMHARNESS_EMBEDDINGS_MAX_CONCURRENT": str(64),
        "STEAMHARNESS_KNOWLEDGE_MAX_READS_PER_ACCOUNT": str(SEARCHES),
        "TMPDIR": str(spool_dir),
    }
    with in_process_server(tmp_path_factory.mktemp("kb-threads"), **env) as live:
        yield live
    assert "Traceback" not in live.log()


def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling what the test's own endpoint counts, bounded by WAIT


def test_searches_waiting_on_a_slow_embeddings_endpoint_hold_no_database_thread(server: LiveServer) -> None:
    engine = make_engine(server.store_url)
    try:
        KnowledgeService(engine, audit=AuditLog(), audit_engine=engine).add(
            LEDGER, "notes", actor=OPERATOR, doc_id="walrus", text="The walrus sleeps on the ice."
        )
    finally:
        engine.dispose()
    reader = {
        "Authorization": f"Bearer {server.create_key('reader', projects=[LEDGER], scopes=['runs.read'])}"
    }
    other_key = server.create_key("other", projects=[HELLO])
    other = {"Authorization": f"Bearer {other_key}"}
    sid = open_session(server, other_key)  # before the attack: the probe is the call itself
    SlowEndpoint.release.clear()
    url = f"{server.base_url}/api/workflows/{LEDGER}/knowledge/search"
    answers: list[httpx2.Response | BaseException] = []

    def search() -> None:
        try:
            answers.append(httpx2.post(url, json={"query": "walrus"}, headers=reader, timeout=WAIT))
        except BaseException as exc:  # reported by the assertions below
            answers.append(exc)

    threads = [threading.Thread(target=search) for _ in range(SEARCHES)]
    try:
        for thread in threads:
            thread.start()
        until(lambda: SlowEndpoint.waiting >= HELD, f"{HELD} searches waiting at the endpoint")
        # Another account, while they wait: a tool call, and a read of the API.
        reply = greet(server, other_key, sid, "probe", timeout=PROBE)
        assert "error" not in reply and reply["result"]["isError"] is False, reply
        listed = httpx2.get(
            f"{server.base_url}/api/workflows/{HELLO}/knowledge/collections", headers=other, timeout=PROBE
        )
        assert listed.status_code == 200, listed.text
        assert SlowEndpoint.waiting >= HELD  # the searches were still waiting all along
    finally:
        SlowEndpoint.release.set()
        for thread in threads:
            thread.join(timeout=WAIT)
    assert len(answers) == SEARCHES
    for answer in answers:
        assert isinstance(answer, httpx2.Response) and answer.status_code == 200, answer
        assert answer.json()["mode"] == "hybrid"
        assert [h["documentId"] for h in answer.json()["hits"]] == ["walrus"]


def open_files(pid: int) -> list[str]:
    """Where each open descriptor of process `pid` points."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile
    return out


def test_an_export_is_streamed_without_a_spool_in_the_temporary_folder(
    server: LiveServer, spool_dir: Path
) -> None:
    body = large_collection(server, INTERACTIVE, "manuals", EXPORT_DOCUMENTS)
    url = f"{server.base_url}/api/workflows/{INTERACTIVE}/knowledge/export"
    admin = {"Authorization": f"Bearer {server.admin_key}"}
    received = bytearray()
    with httpx2.stream("GET", url, headers=admin, timeout=WAIT) as r:
        assert r.status_code == 200
        pieces = r.iter_bytes()
        received += next(pieces)
        # The first bytes are here and most of the export is not: nothing of it is on disk.
        # The server runs in this process: its open descriptors are this process's.
        spooled = [path for path in open_files(os.getpid()) if path.startswith(str(spool_dir))]
        assert spooled == [], spooled
        for piece in pieces:
            received += piece
    lines = [json.loads(line) for line in received.decode().split("\n") if line]
    assert lines[0] == {"type": "collection", "name": "manuals", "language": "english"}
    assert [line["id"] for line in lines[1:]] == [f"d{i:03d}" for i in range(EXPORT_DOCUMENTS)]
    assert all(line["text"] == body for line in lines[1:])


def test_a_members_upload_on_the_knowledge_page_is_refused_before_its_body_is_read(
    server: LiveServer,
) -> None:
    server.add_user(MEMBER[0], password=MEMBER[1])
    server.grant(MEMBER[0], [HELLO])
    with httpx2.Client(base_url=server.base_url, timeout=WAIT) as client:
        token = CSRF_RE.search(client.get("/login").text)
        assert token
        r = client.post(
            "/login",
            data={"username": MEMBER[0], "password": MEMBER[1], "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        csrf = CSRF_RE.search(client.get("/keys").text)
        assert csrf
        cookie = client.cookies.get(COOKIE_NAME)
    boundary = "----knowledge-upload"
    head_of_body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n{csrf.group(1)}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="collection"\r\n\r\ndocs\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode() + b"x" * 65536
    request = (
        f"POST /projects/{HELLO}/knowledge/upload HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Cookie: {COOKIE_NAME}={cookie}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {UPLOAD_BYTES}\r\n\r\n"
    ).encode() + head_of_body
    with socket.create_connection(("127.0.0.1", server.port), timeout=PROBE) as sock:
        sock.sendall(request)  # 64 KiB of the 51 MiB: the rest is never sent
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    assert b"only administrators" in answer or b"403" in answer
