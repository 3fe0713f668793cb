"""Removing a large knowledge-base collection on a real `steamharness serve` (SQLite, a
database busy timeout of BUSY_TIMEOUT seconds) while another account calls a tool over and
over: every call succeeds. The collection goes in short transactions with a pause between
them, so a call's writes wait for one batch at most; before, the removal was one write
transaction of several seconds and the calls it held past their busy timeout failed with
-32603 "database is busy" (the issue: 4 of 7)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.server import HELLO, LEDGER, LiveServer, running_server
from tests.helpers import WAIT
from tests.security.knowledge_server import greet, large_collection, open_session

BUSY_TIMEOUT = "1"
DOCUMENTS = 64  # ~16 MiB, ~17,000 chunks: seconds as one transaction on SQLite
PROBE = 30.0  # a hang guard for each call


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"STEAMHARNESS_DB_BUSY_TIMEOUT_SECONDS": BUSY_TIMEOUT}
    # A live server: its 1 s busy timeout is measured against the server's interpreter alone
    # (in this process, on a loaded machine, its pool sampler's writes met it).
    with running_server(tmp_path_factory.mktemp("kb-removal"), **env) as live:
        yield live


def test_removing_a_large_collection_fails_no_tool_call_of_another_account(server: LiveServer) -> None:
    large_collection(server, LEDGER, "archive", DOCUMENTS)
    key = server.create_key("caller", projects=[HELLO])
    sid = open_session(server, key)
    url = f"{server.base_url}/api/workflows/{LEDGER}/knowledge/collections/archive"
    admin = {"Authorization": f"Bearer {server.admin_key}"}
    removed: list[httpx2.Response | BaseException] = []

    def remove() -> None:
        try:
            removed.append(httpx2.delete(url, headers=admin, timeout=WAIT))
        except BaseException as exc:  # reported by the assertions below
            removed.append(exc)

    remover = threading.Thread(target=remove)
    remover.start()
    replies: list[dict[str, Any]] = []
    try:
        # Calls for as long as the removal runs (at least a few, whatever the machine's pace).
        while remover.is_alive() or len(replies) < 3:
            replies.append(greet(server, key, sid, f"call {len(replies)}", timeout=PROBE))
    finally:
        remover.join(timeout=WAIT)
    failed = [r for r in replies if "error" in r or r["result"].get("isError")]
    assert failed == [], f"{len(failed)} of {len(replies)} tool calls failed: {failed[:2]}"
    [answer] = removed
    assert isinstance(answer, httpx2.Response) and answer.status_code == 200, answer
    assert answer.json() == {"name": "archive", "removedDocuments": DOCUMENTS}
    assert server.query("SELECT count(*) AS n FROM knowledge_documents") == [{"n": 0}]
    assert server.query("SELECT count(*) AS n FROM knowledge_chunks") == [{"n": 0}]
    assert "database is busy" not in server.log()
