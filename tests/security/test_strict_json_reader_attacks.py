"""The strict JSON reader against bodies its size limits allow (issue 36's attack pass, defect 7):

- A JSON body the strict reader's limits allow can hold the interpreter lock for seconds:
  `webui.parse_threads` moves the parse to a thread, but the C parser never lets go of the lock
  while it builds one object of a million members, so the event loop is frozen just the same
  (a 15 MiB knowledge document body whose metadata is such an object: seconds per body).
- Python reads an integer's digits in quadratic time: an MCP body of long numbers is refused
  before it is read.
- `1e999` is read as `float('inf')`: the strict reader refuses `Infinity` by name but takes it
  by another spelling; a knowledge document's metadata stores it (the answer is a 500), and
  the knowledge base's export then writes `Infinity`, which its own import refuses.
"""

from __future__ import annotations

import concurrent.futures
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests import prepared
from tests.e2e.server import HELLO, running_server
from tests.helpers import WAIT
from webui import strict_json
from webui.app import create_app
from webui.knowledge.model import MAX_JSON_VALUES
from webui.mcp import envelope
from webui.settings import Settings

BASE = f"/api/workflows/{HELLO}/knowledge"
PROBE_TIMEOUT = 5.0  # a hang guard on each /healthz probe, not a speed check
MEMBERS = 999_000  # just under the strict reader's 1,000,000 values


def many_members_body() -> bytes:
    """A knowledge document body of ~15 MiB (under the 16 MiB the reader takes, and the upload
    cap the guard gives this path) whose metadata is one object of `MEMBERS` members."""
    members = b",".join(b'"%d":%d' % (i, i) for i in range(MEMBERS))
    body = b'{"collection":"notes","text":"t","metadata":{' + members + b"}}"
    assert len(body) < strict_json.MAX_CHARS
    return body


def test_knowledge_bodies_of_one_huge_object_do_not_freeze_healthz(tmp_path: Path) -> None:
    body = many_members_body()
    # A live server: what is checked is the parser's hold of the server's interpreter lock,
    # which in this process the test's own client threads would share.
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


@pytest.mark.parametrize("number", [b"1e999", b"-1e999"])
def test_the_strict_reader_refuses_a_number_out_of_a_floats_range(number: bytes) -> None:
    with pytest.raises(strict_json.StrictJSONError, match="out of a float's range"):
        strict_json.loads(b'{"n": ' + number + b"}")


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    admin_key = secrets.token_urlsafe(32)
    data = prepared.copy_prepared("web", tmp_path / "data")
    app = create_app(Settings(data_dir=data, server_admin_key=SecretStr(admin_key)))
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
