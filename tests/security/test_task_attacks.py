"""Hostile use of MCP tasks (the tasks extension, 2026-07-28) against the real HTTP app (in
this process: `in_process_server`) and the conformance fixture project: no key, a garbage or
revoked key, another account's key, forged, oversized, unicode and mistyped task ids, a task id
used on another project's or target's endpoint, tasks/update with too many keys or a huge
body, answers to another account's task, and cancel storms.

Each gets its exact error, and changes nothing: the victim's task keeps its status and its
questions stay pending."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer, key_id_of
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, MODERN, POLL, TASKS, Rpc, _run_id
from tests.helpers import WAIT
from tests.support import in_process_server

UNKNOWN = {"code": -32602, "message": "Unknown task"}
INVALID_PARAMS = -32602


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("task-attacks")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> str:
    return server.create_key("alice-tasks")


@pytest.fixture(scope="module")
def mallory(server: LiveServer) -> str:
    return server.create_key("mallory-tasks")


@pytest.fixture
def working(server: LiveServer, alice: str) -> Iterator[str]:
    """A task of alice's that keeps working until the test ends."""
    rpc = Rpc(server, alice)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 60, "label": "victim"}))["taskId"]
    yield task_id
    rpc.task("tasks/cancel", task_id)


@pytest.fixture
def asking(server: LiveServer, alice: str) -> Iterator[tuple[str, str]]:
    """A task of alice's waiting for its one question: (task id, question id)."""
    rpc = Rpc(server, alice)
    task_id = rpc.result(rpc.call("confirm_delete", {"filename": "victim.txt"}))["taskId"]
    [question] = rpc.until(task_id, "input_required")["inputRequests"]
    yield task_id, question
    rpc.task("tasks/cancel", task_id)


def body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}


def raw_post(
    url: str, method: str, params: dict[str, Any], key: str | None, *, content: bytes | None = None
) -> httpx2.Response:
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    if content is None:
        content = json.dumps(body(method, params)).encode()
    return httpx2.post(url, content=content, headers=headers, timeout=WAIT)


def status(server: LiveServer, key: str, task_id: str) -> dict[str, Any]:
    rpc = Rpc(server, key)
    return rpc.result(rpc.task("tasks/get", task_id))


def run_status(server: LiveServer, task_id: str) -> str:
    [run] = server.query("SELECT status FROM runs WHERE id = :r", r=_run_id(task_id))
    return str(run["status"])


def interaction_status(server: LiveServer, question: str) -> str:
    [row] = server.query("SELECT status FROM interactions WHERE id = :i", i=question)
    return str(row["status"])


# --------------------------------------------------------------------------- who asks


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
def test_no_key_a_garbage_key_and_a_revoked_key_get_401_and_change_nothing(
    server: LiveServer, alice: str, working: str, method: str
) -> None:
    revoked = server.create_key("alice-tasks")
    server.revoke_key(key_id_of(revoked))
    url = server.mcp_url(FIXTURE, "draft")
    params: dict[str, Any] = {"taskId": working}
    if method == "tasks/update":
        params["inputResponses"] = {}
    expected = {
        None: "HTTP 401: missing Authorization: Bearer <API key>",
        "shk_garbage": "HTTP 401: invalid API key",
        revoked: "HTTP 401: this API key has been revoked",
    }
    for key, message in expected.items():
        r = raw_post(url, method, params, key)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}
    assert status(server, alice, working)["status"] == "working"
    assert run_status(server, working) == "running"


def test_another_accounts_key_reads_the_task_as_unknown_to_every_method(
    server: LiveServer, alice: str, mallory: str, asking: tuple[str, str]
) -> None:
    task_id, question = asking
    other = Rpc(server, mallory)
    assert other.task("tasks/get", task_id)["error"] == UNKNOWN
    answer = {question: {"action": "accept", "content": {"confirm": True}}}
    assert other.task("tasks/update", task_id, inputResponses=answer)["error"] == UNKNOWN
    assert other.task("tasks/cancel", task_id)["error"] == UNKNOWN
    # Nothing moved: the question is pending, the run waits, alice still sees it.
    assert interaction_status(server, question) == "pending"
    got = status(server, alice, task_id)
    assert got["status"] == "input_required" and set(got["inputRequests"]) == {question}
    # Mallory's own task id cannot carry alice's question either (it is not one of its questions).
    own = other.result(other.call("slow_compute", {"seconds": 60, "label": "mallory"}))["taskId"]
    try:
        assert other.result(other.task("tasks/update", own, inputResponses=answer)) == {
            "resultType": "complete"
        }
        assert interaction_status(server, question) == "pending"
    finally:
        other.task("tasks/cancel", own)


def test_a_key_limited_to_another_project_cannot_reach_the_task(
    server: LiveServer, alice: str, working: str
) -> None:
    scoped = server.create_key("alice-tasks", projects=[HELLO])
    r = raw_post(server.mcp_url(FIXTURE, "draft"), "tasks/cancel", {"taskId": working}, scoped)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == -32001
    assert status(server, alice, working)["status"] == "working"


# --------------------------------------------------------------------------- which task


@pytest.mark.parametrize(
    "forged",
    [
        "",
        ".",
        "x" * 128,
        "\x00",
        "é" * 20 + ".mac",
        "\u202e20261203-000000000000.AAAAAAAAAAAAAAAAAAAAAA",
        # A non-ASCII mac: hmac.compare_digest refuses non-ASCII str with a TypeError.
        "🦀.🦀",
        f"20261203-000000000000.{'é' * 22}",
    ],
)
def test_forged_and_unicode_task_ids_are_unknown(
    server: LiveServer, alice: str, working: str, forged: str
) -> None:
    rpc = Rpc(server, alice)
    for method in ("tasks/get", "tasks/cancel"):
        assert rpc.post(method, {"taskId": forged})["error"] == UNKNOWN, (method, forged)
    assert rpc.post("tasks/update", {"taskId": forged, "inputResponses": {}})["error"] == UNKNOWN


def test_lookalike_ids_of_a_real_task_are_unknown(server: LiveServer, alice: str, working: str) -> None:
    rpc = Rpc(server, alice)
    run_id, _, mac = working.rpartition(".")
    lookalikes = [
        run_id,
        f"{run_id}.",
        f"{run_id}.AAAAAAAAAAAAAAAAAAAAAA",
        f"{working}x",
        f"{working}\n",
        f" {working}",
        working.upper(),
        working.replace(".", "\uff0e"),  # a fullwidth full stop
        f"{run_id}.{mac[:-1]}",
        f"{mac}.{run_id}",
    ]
    for forged in lookalikes:
        assert rpc.post("tasks/cancel", {"taskId": forged})["error"] == UNKNOWN, repr(forged)
    assert status(server, alice, working)["status"] == "working"


@pytest.mark.parametrize("params", [{"taskId": "x" * 129}, {"taskId": "x" * 100_000}, {"taskId": 5}, {}])
def test_oversized_and_mistyped_task_ids_are_invalid_params(
    server: LiveServer, alice: str, params: dict[str, Any]
) -> None:
    error = Rpc(server, alice).post("tasks/get", params)["error"]
    assert error["code"] == INVALID_PARAMS and error["message"] == "Invalid request parameters", error


def test_a_task_id_used_on_another_projects_or_targets_endpoint_is_unknown(
    server: LiveServer, alice: str, working: str
) -> None:
    for url in (server.mcp_url(HELLO), server.mcp_url(FIXTURE, "latest")):
        for method in ("tasks/get", "tasks/cancel"):
            r = raw_post(url, method, {"taskId": working}, alice)
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"] == UNKNOWN, (url, r.text)
    assert status(server, alice, working)["status"] == "working"


# --------------------------------------------------------------------------- what is sent


def test_tasks_update_with_six_thousand_keys_is_refused_whole(
    server: LiveServer, alice: str, asking: tuple[str, str]
) -> None:
    task_id, question = asking
    responses: dict[str, Any] = {
        f"k{i}": {"action": "accept", "content": {}} for i in range(6_000)
    }  # within the strict reader's 20,000 arrays and objects
    responses[question] = {"action": "accept", "content": {"confirm": True}}  # a real one among them
    error = Rpc(server, alice).task("tasks/update", task_id, inputResponses=responses)["error"]
    assert error["code"] == INVALID_PARAMS and error["message"] == "Invalid request parameters", error
    assert interaction_status(server, question) == "pending"
    assert status(server, alice, task_id)["status"] == "input_required"


def test_tasks_update_with_a_huge_body_is_413_and_changes_nothing(
    server: LiveServer, alice: str, asking: tuple[str, str]
) -> None:
    task_id, question = asking
    params = {
        "taskId": task_id,
        "inputResponses": {
            question: {"action": "accept", "content": {"confirm": True, "pad": "y" * 2_000_000}}
        },
    }
    r = raw_post(server.mcp_url(FIXTURE, "draft"), "tasks/update", params, alice)
    assert r.status_code == 413, r.text
    assert r.json()["error"] == {
        "code": -32600,
        "message": "HTTP 413: the request body is larger than 1048576 bytes",
    }
    assert interaction_status(server, question) == "pending"


@pytest.mark.parametrize(
    "answer",
    [
        "accept",
        {"action": "maybe"},
        {"action": "accept", "content": {"confirm": "yes"}},
    ],
)
def test_tasks_update_with_a_malformed_answer_is_refused_naming_the_question(
    server: LiveServer, alice: str, asking: tuple[str, str], answer: Any
) -> None:
    task_id, question = asking
    error = Rpc(server, alice).task("tasks/update", task_id, inputResponses={question: answer})["error"]
    assert error["code"] == INVALID_PARAMS and question in error["message"], error
    assert interaction_status(server, question) == "pending"


# --------------------------------------------------------------------------- cancel storms


def test_a_cancel_storm_ends_the_run_once_and_every_cancel_is_acknowledged(
    server: LiveServer, alice: str, mallory: str
) -> None:
    rpc = Rpc(server, alice)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 60, "label": "storm"}))["taskId"]
    lock = threading.Lock()

    def cancel(i: int) -> dict[str, Any]:
        who = Rpc(server, alice if i % 2 == 0 else mallory)
        with lock:
            who.next_id = i  # one id per request (Rpc counts them)
        return who.task("tasks/cancel", task_id)

    with ThreadPoolExecutor(max_workers=16) as pool:
        replies = list(pool.map(cancel, range(64)))
    mine = [r for i, r in enumerate(replies) if i % 2 == 0]
    theirs = [r for i, r in enumerate(replies) if i % 2 == 1]
    assert all(rpc.result(r) == {"resultType": "complete"} for r in mine), mine
    assert all(r["error"] == UNKNOWN for r in theirs), theirs
    ended = rpc.until(task_id, "cancelled", "completed", "failed")
    assert ended["status"] == "cancelled" and "cancelled the task" in ended["statusMessage"]
    assert run_status(server, task_id) == "cancelled"
    finals = server.query(
        "SELECT kind FROM run_events WHERE run_id = :r AND kind IN ('cancelled', 'finished')",
        r=_run_id(task_id),
    )
    assert len(finals) <= 1, finals
    # The server is fine afterwards: a new task runs to its result.
    again = rpc.result(rpc.call("slow_compute", {"seconds": 1, "label": "after"}))["taskId"]
    assert rpc.until(again, "completed")["result"]["content"][0]["text"] == "after: computed in 1 s"


def test_a_strangers_cancel_storm_leaves_the_task_working(
    server: LiveServer, alice: str, mallory: str
) -> None:
    rpc = Rpc(server, alice)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 60, "label": "storm2"}))["taskId"]
    try:

        def cancel(i: int) -> dict[str, Any]:
            who = Rpc(server, mallory)
            who.next_id = i
            return who.task("tasks/cancel", task_id)

        with ThreadPoolExecutor(max_workers=16) as pool:
            replies = list(pool.map(cancel, range(48)))
        assert all(r["error"] == UNKNOWN for r in replies)
        assert status(server, alice, task_id)["status"] == "working"
        assert run_status(server, task_id) == "running"
    finally:
        rpc.task("tasks/cancel", task_id)


# --------------------------------------------------------------------------- what a poller is sent


def test_a_strangers_poll_without_sampling_cannot_refuse_another_accounts_sampling_request(
    server: LiveServer, alice: str, mallory: str
) -> None:
    owner = Rpc(server, alice)
    owner.caps = {"sampling": {}, "extensions": {TASKS: {}}}
    task_id = owner.result(owner.call("sample_task", {"prompt": "mine"}))["taskId"]
    try:
        [(key, request)] = owner.until(task_id, "input_required")["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        stranger = Rpc(server, mallory)  # declares no sampling: its poll would refuse one of its own
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            params = {"inputResponses": {key: {"action": "decline"}}} if method == "tasks/update" else {}
            assert stranger.task(method, task_id, **params)["error"] == UNKNOWN
        # Nothing was declined on alice's behalf: the request still waits for her client.
        [row] = server.query("SELECT status FROM interactions WHERE run_id = :r", r=_run_id(task_id))
        assert row["status"] == "pending"
        assert list(owner.result(owner.task("tasks/get", task_id))["inputRequests"]) == [key]
    finally:
        owner.task("tasks/cancel", task_id)


@pytest.mark.parametrize(
    "header",
    [
        "=?base64?" + "A" * 6000 + "?=",  # decodes to bytes that are no task id
        "=?base64?////?=",  # not UTF-8 once decoded
        "=?base64?YQ?=",  # not canonical base64
        "=?base64??=",
        "x" * 4000,
    ],
)
def test_hostile_mcp_name_headers_are_header_mismatch_and_change_nothing(
    server: LiveServer, alice: str, working: str, header: str
) -> None:
    rpc = Rpc(server, alice)
    for method in ("tasks/get", "tasks/cancel"):
        reply = rpc.post(method, {"taskId": working}, name=header)
        assert reply["error"]["code"] == -32020, reply
    assert run_status(server, working) == "running"
    assert status(server, alice, working)["status"] == "working"


def test_a_poller_answering_a_question_it_was_not_sent_by_its_id_changes_nothing(
    server: LiveServer, alice: str
) -> None:
    # A form, polled by a client without elicitation: never listed, so never answerable here.
    formless = Rpc(server, alice, elicitation=False)
    task_id = formless.result(formless.call("confirm_delete", {"filename": "unsent.txt"}))["taskId"]
    try:
        deadline = time.monotonic() + WAIT
        while not (
            rows := server.query(
                "SELECT id FROM interactions WHERE run_id = :r AND status = 'pending'", r=_run_id(task_id)
            )
        ):
            assert time.monotonic() < deadline, "the question was never asked"
            time.sleep(POLL)
        [question] = rows
        answer = {"action": "accept", "content": {"confirm": True}}
        ack = formless.task("tasks/update", task_id, inputResponses={question["id"]: answer})
        assert formless.result(ack) == {"resultType": "complete"}
        assert interaction_status(server, question["id"]) == "pending"
        assert formless.result(formless.task("tasks/get", task_id))["status"] == "working"
    finally:
        formless.task("tasks/cancel", task_id)
