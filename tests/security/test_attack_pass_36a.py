"""Attack pass on issue 36's fixes (defect 2: files read in a bounded child, capped per account;
defect 7: JSON bodies parsed off the event loop by the strict reader). Each test here attacks a
hole the pass found, now closed:

- A JSON body the strict reader's limits allow can hold the interpreter lock for seconds:
  `webui.parse_threads` moves the parse to a thread, but the C parser never lets go of the lock
  while it builds one object of a million members, so the event loop is frozen just the same
  (a 15 MiB knowledge document body whose metadata is such an object: seconds per body).
- `1e999` is read as `float('inf')`: the strict reader refuses `Infinity` by name but takes it
  by another spelling; a knowledge document's metadata stores it (the answer is a 500), and
  the knowledge base's export then writes `Infinity`, which its own import refuses.
- Two accounts at their per-account cap of files being read (2 each) take the server's
  every turn (4): every other account's upload is refused with too_many_extractions while
  they keep uploading (the class of defect 4: no room kept for accounts that hold none).
- `steamharness mcp` (stdio) writes each run's log and output lines to its stderr as they
  are: a handler's `ctx.log` of a client's argument puts escape sequences on the terminal.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from fastapi.testclient import TestClient

from tests import prepared, processes
from tests.conftest import EXAMPLES
from tests.e2e.server import HELLO, LiveServer, running_server
from tests.helpers import WAIT, needs_root
from tests.knowledge.files import form_bomb_pdf, pdf
from tests.security.test_knowledge_extraction import extracting, wait_until
from webui import strict_json
from webui.app import create_app
from webui.knowledge.model import MAX_JSON_VALUES
from webui.mcp import envelope
from webui.settings import Settings

BASE = f"/api/workflows/{HELLO}/knowledge"
PROBE_TIMEOUT = 5.0  # a hang guard on each /healthz probe, not a speed check
MEMBERS = 999_000  # just under the strict reader's 1,000,000 values


# ------------------------------------------------------------------ defect 7: the lock


def many_members_body() -> bytes:
    """A knowledge document body of ~15 MiB (under the 16 MiB the reader takes, and the upload
    cap the guard gives this path) whose metadata is one object of `MEMBERS` members."""
    members = b",".join(b'"%d":%d' % (i, i) for i in range(MEMBERS))
    body = b'{"collection":"notes","text":"t","metadata":{' + members + b"}}"
    assert len(body) < strict_json.MAX_CHARS
    return body


def test_knowledge_bodies_of_one_huge_object_do_not_freeze_healthz(tmp_path: Path) -> None:
    body = many_members_body()
    with running_server(tmp_path) as server:
        url = f"{server.base_url}{BASE}/documents"
        admin = {"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"}

        def post() -> httpx2.Response:
            return httpx2.post(url, headers=admin, content=body, timeout=WAIT * 4)

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            attacks = [pool.submit(post) for _ in range(4)]
            probes = 0
            while probes == 0 or not all(f.done() for f in attacks):
                health = httpx2.get(f"{server.base_url}/healthz", timeout=PROBE_TIMEOUT)
                assert health.status_code == 200
                probes += 1
            for f in attacks:
                r = f.result(timeout=WAIT)
                assert r.status_code == 400, r.text
                assert r.json()["error"]["message"] == (
                    "the request body is not valid JSON: the document holds more than"
                    f" {MAX_JSON_VALUES} values"
                )


@pytest.mark.parametrize("digits", [4_299, 101])
def test_an_mcp_body_of_long_numbers_is_refused_before_it_is_read(digits: int) -> None:
    """Python reads an integer's digits in quadratic time: 3,658 numbers of 4,299 digits (an
    MCP body of 15 MiB) held the GIL for 1.9 s in a parse thread."""
    numbers = b",".join([b"9" * digits] * 3_658)
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"n":[' + numbers + b"]}}}"
    refusal = envelope.read_body(body)
    assert isinstance(refusal, envelope.Refusal)
    assert refusal.message == "Parse error: a number is written with more than 100 characters"


# ------------------------------------------------------------------ defect 7: 1e999


@pytest.mark.parametrize("number", [b"1e999", b"-1e999"])
def test_the_strict_reader_refuses_a_number_out_of_a_floats_range(number: bytes) -> None:
    with pytest.raises(strict_json.StrictJSONError, match="out of a float's range"):
        strict_json.loads(b'{"n": ' + number + b"}")


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    admin_key = secrets.token_urlsafe(32)
    data = prepared.copy_prepared("web", tmp_path / "data")
    app = create_app(Settings(data_dir=data, server_admin_key=admin_key))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client, {"Authorization": f"Bearer {admin_key}", "Content-Type": "application/json"}


def test_metadata_of_1e999_is_refused_and_an_export_imports_again(
    kb: tuple[TestClient, dict[str, str]],
) -> None:
    client, admin = kb
    body = b'{"collection":"g","text":"hello tea","id":"d1","metadata":{"n":1e999}}'
    added = client.post(f"{BASE}/documents", content=body, headers=admin)
    exported = client.get(f"{BASE}/export", headers=admin)
    assert exported.status_code == 200
    lines = [line for line in exported.content.split(b"\n") if line.strip()]
    for line in lines:
        strict_json.loads(line)  # the export is JSON the server itself reads
    assert added.status_code == 400, (added.status_code, added.text)
    assert added.json()["error"]["message"] == (
        "the request body is not valid JSON:"
        " the number 1e999 is out of a float's range (at most about 1.8e308)"
    )
    assert not any(b'"d1"' in line for line in lines)  # nothing was stored


# ------------------------------------------------------------------ defect 2: the turns


SECONDS = 10  # the server's bound on reading one file: the attack lasts this long (a busy host)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with running_server(
        tmp_path,
        STEAMHARNESS_KNOWLEDGE_EXTRACT_SECONDS=str(SECONDS),
        STEAMHARNESS_KNOWLEDGE_EXTRACT_WAIT_SECONDS="0",
    ) as server:
        yield server


def upload(live: LiveServer, key: str, name: str, data: bytes) -> httpx2.Response:
    return httpx2.post(
        f"{live.base_url}{BASE}/documents",
        data={"collection": "files"},
        files={"file": (name, data)},
        headers={"Authorization": f"Bearer {key}"},
        timeout=SECONDS + WAIT,
    )


def test_two_accounts_cannot_take_every_turn_to_read_a_file(live: LiveServer) -> None:
    """Each of two accounts sends its cap of 2 slow files at once: the server's last turn of 4
    is kept for accounts with none being read, so one of the four is refused at once (no wait:
    STEAMHARNESS_KNOWLEDGE_EXTRACT_WAIT_SECONDS=0) and a third account's file is read."""
    mallory = live.create_key("mallory", scopes=["knowledge"])
    trudy = live.create_key("trudy", scopes=["knowledge"])
    bob = live.create_key("bob", scopes=["knowledge"])
    assert live.proc is not None
    pid = live.proc.pid
    bomb = form_bomb_pdf()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        attack: list[concurrent.futures.Future[httpx2.Response]] = []
        for who, key in (("m", mallory), ("t", trudy)):
            attack += [pool.submit(upload, live, key, f"{who}{n}.pdf", bomb) for n in range(2)]
        refused = next(concurrent.futures.as_completed(attack, timeout=WAIT)).result()
        reading: Callable[[], bool] = lambda: len(extracting(pid)) == 3  # noqa: E731
        wait_until(reading, bound=WAIT)
        added = upload(live, bob, "owls.pdf", pdf("barn owls hunt at dusk"))
        held = len(extracting(pid)) == 3  # the attack's other files were still being read
        answers = [f.result(timeout=SECONDS + WAIT) for f in attack]
    assert held
    assert added.status_code == 201, added.text
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "too_many_extractions"
    assert "kept for accounts with none being read" in refused.json()["error"]["message"]
    assert sorted(a.status_code for a in answers) == [400, 400, 400, 429]  # the bombs: not read in time


# ------------------------------------------------------------------ defect 8: stdio's stderr


@needs_root
def test_the_stdio_server_writes_a_runs_log_to_stderr_terminal_safe(tmp_path: Path) -> None:
    command, args = processes.stdio_command(
        ["mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")]
    )
    proc = processes.Popen(
        [command, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "STEAMHARNESS_WORKER_USER": ""},
    )
    assert proc.stdin is not None and proc.stdout is not None
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31m"  # window title, clear screen, C1 CSI
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "escapes", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "greet", "arguments": {"name": hostile}}},
    ]  # fmt: skip
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        replies = []
        while not any(r.get("id") == 2 for r in replies):
            line = proc.stdout.readline()  # bounded: the call ends within its entrypoint's timeout
            assert line, "the server stopped before answering the call"
            replies.append(json.loads(line))
        _, err = proc.communicate(timeout=WAIT)  # closes stdin: the server ends
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)
    logged = err.decode("utf-8", "replace")
    assert "greeting" in logged  # the run's ctx.log line is on stderr
    assert "\x1b" not in logged and "\x9b" not in logged and "\x07" not in logged, repr(logged[-500:])
