"""A file whose parsing costs hours never holds the server: the knowledge base reads HTML, PDF
and .docx files in a bounded child process (webui.knowledge.reader over webui.bounded_child),
never in a database thread, and a few files of one account at a time.

The attack (issue 36): a PDF of under 1 KB whose one page draws a form XObject a thousand
times, the form showing a thousand text operators (`form_bomb_pdf`): pypdf parses a million
operators in Python, minutes of CPU, and the old 30 s deadline was checked between pages.
Thirteen such uploads by one `knowledge` key held every database thread, and another
account's calls waited on them."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.cli_runner import run_cli
from tests.e2e.server import HELLO, LiveServer
from tests.e2e.test_http_mcp import headers, open_session, sse_json
from tests.helpers import WAIT
from tests.knowledge.files import form_bomb_pdf, pdf
from tests.knowledge.test_cli import clean_env, refused, write_project
from tests.support import in_process_server
from webui.blocking import run_db
from webui.errors import KnowledgeRefused, TooManyExtractions
from webui.knowledge.reader import FileReader, FileText, ReadLimits

BASE = f"/api/workflows/{HELLO}/knowledge"
SECONDS = 5  # the server's bound on reading one file, kept small so the attack stays short
PROBE = 5.0  # a hang guard on each probe of the server while the attack runs, not a speed check
CALL = 30.0  # the same for a tool call, which starts a worker on a loaded machine
UPLOADS = 13  # as in the issue: one past the server's 12 database threads


# ------------------------------------------------------------------ the file itself


def test_plain_pypdf_reads_the_form_bomb_for_long() -> None:
    """What the old code did in a database thread: still reading when the bound the server now
    gives a file has passed (a real process, so the test pays for the bound alone; unbounded,
    it reads for minutes)."""
    data = form_bomb_pdf()
    assert len(data) < 1024
    script = (
        "import io, sys, pypdf; r = pypdf.PdfReader(io.BytesIO(sys.stdin.buffer.read()));"
        " r.pages[0].extract_text()"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", script], input=data, timeout=SECONDS, check=False)


# ------------------------------------------------------------------ the reader


pytestmark = pytest.mark.anyio


def reader(limits: ReadLimits | None = None, max_text_bytes: int = 1024 * 1024) -> FileReader:
    return FileReader(limits, max_file_bytes=1024 * 1024, max_text_bytes=max_text_bytes)


async def outcome(read: Callable[[], Awaitable[FileText]]) -> FileText | Exception:
    try:
        return await read()
    except (KnowledgeRefused, TooManyExtractions) as exc:
        return exc


async def test_an_account_past_its_reads_at_once_is_refused_and_another_account_is_not() -> None:
    files = reader(ReadLimits(seconds=2, per_account=2, total=3, wait_seconds=0))
    bomb = form_bomb_pdf()
    results: dict[str, FileText | Exception] = {}

    async def read(key: str, account: str, name: str, data: bytes) -> None:
        results[key] = await outcome(lambda: files.read(name, data, account=account))

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(read, f"mallory{n}", "user:mallory", f"bomb{n}.pdf", bomb)
        await wait_until_async(lambda: len(results) == 1)  # mallory's third is refused at once
        tg.start_soon(read, "bob", "user:bob", "fine.pdf", pdf("portable owls"))
    timed_out = [r for r in results.values() if isinstance(r, KnowledgeRefused)]
    over = [r for r in results.values() if isinstance(r, TooManyExtractions)]
    assert len(timed_out) == 2 and len(over) == 1, results
    assert all(r.message.endswith(".pdf: the PDF could not be read within 2 s") for r in timed_out)
    assert over[0].status == 429 and "already has 2 files being read" in over[0].message
    assert results["bob"] == FileText("fine.pdf", "portable owls", None)
    assert files.reading() == 0


async def test_a_file_past_the_cap_waits_for_a_turn_when_it_may() -> None:
    files = reader(ReadLimits(seconds=2, per_account=1, total=4, wait_seconds=WAIT))
    results: list[FileText | Exception] = []

    async def read(name: str, data: bytes) -> None:
        results.append(await outcome(lambda: files.read(name, data, account="user:alice")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read, "bomb.pdf", form_bomb_pdf())
        await wait_until_async(lambda: files.reading("user:alice") == 1)  # the bomb has the one turn
        tg.start_soon(read, "fine.pdf", pdf("after the bomb"))
    first, second = results
    assert isinstance(first, KnowledgeRefused) and first.message.endswith("could not be read within 2 s")
    assert second == FileText("fine.pdf", "after the bomb", None)


async def test_a_file_is_never_read_in_a_database_thread() -> None:
    with pytest.raises(RuntimeError, match="not in run_db"):
        await run_db(reader().read_blocking, "a.pdf", pdf("words"))


def test_a_text_past_a_documents_size_or_a_file_past_a_files_is_refused_naming_it() -> None:
    files = reader(ReadLimits(seconds=WAIT), max_text_bytes=10)
    with pytest.raises(KnowledgeRefused, match=r"^a\.pdf: its text is larger than 10 bytes$"):
        files.read_blocking("a.pdf", pdf("more than ten bytes of text"))
    with pytest.raises(KnowledgeRefused, match=r"^b\.docx: larger than 1048576 bytes$"):
        files.read_blocking("b.docx", b"x" * (1024 * 1024 + 1))
    assert files.read_blocking("c.md", b"# Short") == FileText("c.md", "# Short", "Short")


# ------------------------------------------------------------------ the CLI


def test_the_cli_reads_the_file_in_the_same_bounded_child(tmp_path: Path) -> None:
    folder = write_project(tmp_path / "proj")
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(form_bomb_pdf())
    env = {**clean_env(), "STEAMHARNESS_KNOWLEDGE_EXTRACT_SECONDS": "1"}
    data = str(tmp_path / "data")
    done = run_cli(["knowledge", "add", folder, "docs", str(bomb), "--data-dir", data], env=env)
    refused(done, f"{bomb}: the PDF could not be read within 1 s")
    listed = run_cli(["knowledge", "list", folder, "--json", "--data-dir", data], env=env)
    assert listed.returncode == 0 and "bomb" not in listed.stdout, listed


# ------------------------------------------------------------------ a real server (in this process)


def wait_until(check: Callable[[], object], bound: float = WAIT) -> None:
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


async def wait_until_async(check: Callable[[], object]) -> None:
    with anyio.fail_after(WAIT):
        while not check():
            await anyio.sleep(0.01)


def extracting(server_pid: int) -> list[int]:
    """The bounded children of the server reading a file now."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            status = Path(f"/proc/{name}/status").read_text()
            ppid = int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])
            if ppid == server_pid and b"webui.bounded_child" in cmdline and b"extract_child" in cmdline:
                found.append(int(name))
    return found


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with in_process_server(
        tmp_path,
        STEAMHARNESS_KNOWLEDGE_EXTRACT_SECONDS=str(SECONDS),
        STEAMHARNESS_KNOWLEDGE_EXTRACT_WAIT_SECONDS="0",  # past the cap: refused at once
    ) as server:
        yield server


def upload(live: LiveServer, key: str, name: str, data: bytes) -> httpx2.Response:
    return httpx2.post(
        f"{live.base_url}{BASE}/documents",
        data={"collection": "files"},
        files={"file": (name, data)},
        headers={"Authorization": f"Bearer {key}"},
        timeout=SECONDS + CALL,  # a hang guard: the old code read this file for minutes
    )


def echo(live: LiveServer, key: str, sid: str, text: str) -> object:
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }
    r = httpx2.post(live.mcp_url(HELLO), headers=headers(key, sid), json=body, timeout=CALL)
    assert r.status_code == 200, r.text
    return sse_json(r)["result"]["structuredContent"]["output"]


def documents(live: LiveServer, key: str) -> list[str]:
    r = httpx2.get(
        f"{live.base_url}{BASE}/documents", headers={"Authorization": f"Bearer {key}"}, timeout=CALL
    )
    assert r.status_code == 200, r.text
    return [d["source"] for d in r.json()["documents"]]


def test_thirteen_form_bombs_by_one_key_hold_nothing_of_another_account(live: LiveServer) -> None:
    mallory = live.create_key("mallory", scopes=["knowledge"])
    bob = live.create_key("bob", scopes=["knowledge", "runs.read"])
    alice = live.create_key("alice")
    sid = open_session(live, alice)
    assert echo(live, alice, sid, "before") == {"text": "before"}  # its worker pool is up
    bomb = form_bomb_pdf()
    with concurrent.futures.ThreadPoolExecutor(max_workers=UPLOADS) as pool:
        attack = [pool.submit(upload, live, mallory, f"bomb{n}.pdf", bomb) for n in range(UPLOADS)]
        # While mallory's files are being read (their children are there to see):
        wait_until(lambda: extracting(os.getpid()), bound=CALL)  # the server runs in this process
        for _ in range(5):
            health = httpx2.get(f"{live.base_url}/healthz", timeout=PROBE)
            assert health.status_code == 200 and health.json()["status"] == "ok"
        assert documents(live, bob) == []  # a read of another account, through the database
        assert echo(live, alice, sid, "during") == {"text": "during"}
        added = upload(live, bob, "owls.pdf", pdf("barn owls hunt at dusk"))  # another account's turn
        assert added.status_code == 201, added.text
        results = [f.result(timeout=SECONDS + CALL) for f in attack]
    timed_out = [r for r in results if r.status_code == 400]
    over = [r for r in results if r.status_code == 429]
    assert len(timed_out) == 2 and len(over) == UPLOADS - 2, [(r.status_code, r.text) for r in results]
    for r in timed_out:
        error = r.json()["error"]
        assert error["code"] == "invalid_knowledge"
        assert error["message"].endswith(f".pdf: the PDF could not be read within {SECONDS} s"), error
    for r in over:
        assert r.json()["error"]["code"] == "too_many_extractions" and r.headers["retry-after"].isdigit()
    assert documents(live, bob) == ["owls.pdf"]  # nothing of the bombs was stored
    wait_until(lambda: not extracting(os.getpid()), bound=CALL)
