"""The server's turns to read a file (issue 36's attack pass, defect 2: files read in a bounded
child, capped per account): two accounts at their per-account cap of files being read (2 each)
took the server's every turn (4), so every other account's upload was refused with
too_many_extractions while they kept uploading. The last turn is kept for accounts with none
being read."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer
from tests.helpers import WAIT
from tests.knowledge.files import form_bomb_pdf, pdf
from tests.security.test_knowledge_extraction import extracting, wait_until
from tests.support import in_process_server

BASE = f"/api/workflows/{HELLO}/knowledge"


SECONDS = 10  # the server's bound on reading one file: the attack lasts this long (a busy host)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with in_process_server(
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
    pid = os.getpid()  # the server runs in this process: the readers are its children
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
