"""Input rounds keyed by the handler (`ctx.ask(..., key=...)`, 2026-07-28, SEP-2322) against a
real `steamharness serve` and the conformance fixture project: the round names a question by
its key, a retry answers it by that key, a first call may answer it ahead, a round is
checked whole before any answer is recorded, and a task's questions carry the same keys.

Plain stateless 2026-07-28 POSTs (tests/e2e/test_mcp_tasks.py's client); every wait polls
what it asserts, bounded by WAIT."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, POLL, Rpc
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("input-keys")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("rounds")


def _accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


def _questions(server: LiveServer, tool: str) -> list[dict[str, Any]]:
    return server.query(
        "SELECT i.id, i.input_key, i.status, i.channel, i.answer FROM interactions i"
        " JOIN runs r ON r.id = i.run_id WHERE r.entrypoint_id = :e ORDER BY i.created_at",
        e=tool,
    )


def _pending_keys(server: LiveServer, run_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT
    while True:
        rows = server.query(
            "SELECT id, input_key FROM interactions WHERE run_id = :r AND status = 'pending'", r=run_id
        )
        if len(rows) >= count:
            return rows
        assert time.monotonic() < deadline, f"run {run_id}: {rows} pending, not {count}"
        time.sleep(POLL)


def _run_of_question(server: LiveServer, interaction_id: str) -> str:
    [row] = server.query("SELECT run_id FROM interactions WHERE id = :i", i=interaction_id)
    return row["run_id"]


def test_a_question_is_asked_under_its_handlers_key_and_answered_by_it(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    tool = "test_input_required_result_elicitation"
    first = rpc.result(rpc.call(tool))
    assert first["resultType"] == "input_required" and set(first["inputRequests"]) == {"user_name"}
    asked = first["inputRequests"]["user_name"]
    assert asked["method"] == "elicitation/create"
    assert asked["params"]["message"].endswith("What is your name?")
    assert asked["params"]["requestedSchema"]["required"] == ["name"]

    done = rpc.result(
        rpc.call(
            tool, inputResponses={"user_name": _accept(name="Alice")}, requestState=first["requestState"]
        )
    )
    assert done["content"] == [{"type": "text", "text": "Hello, Alice!"}] and not done.get("isError")
    [row] = _questions(server, tool)
    assert row["input_key"] == "user_name" and row["status"] == "answered"
    assert row["channel"] == "mcp-input-required"


def test_an_answer_sent_ahead_under_the_key_is_taken_without_a_round(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    tool = "test_input_required_result_request_state"
    before = len(_questions(server, tool))
    done = rpc.result(rpc.call(tool, inputResponses={"confirm": _accept(ok=True), "unknown": _accept(x=1)}))
    assert done["content"][0]["text"] == "state-ok: confirmed=True"
    rows = _questions(server, tool)[before:]
    assert [(r["input_key"], r["status"], r["channel"]) for r in rows] == [
        ("confirm", "answered", "mcp-input-required")
    ]


def test_an_answer_ahead_that_does_not_fit_is_dropped_and_the_question_asked(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key, tasks=False)
    tool = "test_input_required_result_tampered_state"
    before = len(_questions(server, tool))
    asked = rpc.result(rpc.call(tool, inputResponses={"confirm": _accept(ok="not a boolean")}))
    assert asked["resultType"] == "input_required" and set(asked["inputRequests"]) == {"confirm"}
    [row] = _questions(server, tool)[before:]
    assert row["status"] == "pending" and row["answer"] in (None, "null")


def test_a_wrong_answer_in_a_retry_is_a_clear_error_and_the_question_stays_open(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key, tasks=False)
    tool = "test_input_required_result_elicitation"
    first = rpc.result(rpc.call(tool))
    wrong = rpc.call(tool, inputResponses={"user_name": _accept(name=5)}, requestState=first["requestState"])
    assert wrong["error"]["code"] == -32602
    assert wrong["error"]["message"].startswith("user_name: invalid answer"), wrong["error"]
    run_id = _run_of_question(server, _questions(server, tool)[-1]["id"])
    assert [r["input_key"] for r in _pending_keys(server, run_id, 1)] == ["user_name"]
    done = rpc.result(
        rpc.call(tool, inputResponses={"user_name": _accept(name="Bo")}, requestState=first["requestState"])
    )
    assert done["content"][0]["text"] == "Hello, Bo!"


def test_each_round_of_several_names_its_own_keys_and_state(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    tool = "test_input_required_result_multi_round"
    one = rpc.result(rpc.call(tool))
    assert set(one["inputRequests"]) == {"step1"}
    two = rpc.result(
        rpc.call(tool, inputResponses={"step1": _accept(name="Alice")}, requestState=one["requestState"])
    )
    assert set(two["inputRequests"]) == {"step2"} and two["requestState"] != one["requestState"]
    # The first round's state again, answering what it never asked: the run's next round.
    again = rpc.result(
        rpc.call(tool, inputResponses={"step2": _accept(color="red")}, requestState=one["requestState"])
    )
    assert again["resultType"] == "input_required" and set(again["inputRequests"]) == {"step2"}
    done = rpc.result(
        rpc.call(tool, inputResponses={"step2": _accept(color="blue")}, requestState=two["requestState"])
    )
    assert done["content"][0]["text"] == "Alice likes blue"


def _round_with_both(rpc: Rpc, server: LiveServer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A round that carries both questions: the first round may have seen only one of them
    (the handler asks them from two threads); a retry answering nothing asks all pending."""
    first = rpc.result(rpc.call(tool, arguments))
    [some, *_] = first["inputRequests"].values()
    assert some["method"] == "elicitation/create"
    newest = server.query(
        "SELECT i.run_id FROM interactions i JOIN runs r ON r.id = i.run_id"
        " WHERE r.entrypoint_id = :e ORDER BY i.created_at DESC LIMIT 1",
        e=tool,
    )[0]["run_id"]
    _pending_keys(server, newest, 2)
    both = rpc.result(rpc.call(tool, arguments, inputResponses={}, requestState=first["requestState"]))
    assert both["resultType"] == "input_required", both
    return both


def test_a_round_of_two_is_checked_whole_before_any_answer_is_recorded(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    tool = "two_keyed_questions"
    both = _round_with_both(rpc, server, tool, {})
    assert set(both["inputRequests"]) == {"first", "second"}
    state = both["requestState"]
    bad = rpc.call(
        tool, {}, inputResponses={"first": _accept(name="A"), "second": _accept(name=[])}, requestState=state
    )
    assert bad["error"]["code"] == -32602 and bad["error"]["message"].startswith("second: "), bad
    rows = server.query(
        "SELECT i.status FROM interactions i JOIN runs r ON r.id = i.run_id"
        " WHERE r.entrypoint_id = :e AND r.status = 'waiting_for_input'",
        e=tool,
    )
    assert rows and {r["status"] for r in rows} == {"pending"}  # "first" was not recorded either
    done = rpc.result(
        rpc.call(
            tool,
            {},
            inputResponses={"first": _accept(name="A"), "second": _accept(name="B")},
            requestState=state,
        )
    )
    assert done["content"][0]["text"] == "A, B"


def test_two_questions_under_one_key_the_later_is_named_by_its_id(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    both = _round_with_both(rpc, server, "two_keyed_questions", {"same": True})
    keys = set(both["inputRequests"])
    assert "same" in keys and len(keys) == 2
    [other] = keys - {"same"}
    [row] = server.query("SELECT input_key FROM interactions WHERE id = :i", i=other)
    assert row["input_key"] == "same"
    answers = {k: _accept(name=k[:4]) for k in keys}
    done = rpc.result(
        rpc.call(
            "two_keyed_questions", {"same": True}, inputResponses=answers, requestState=both["requestState"]
        )
    )
    assert sorted(done["content"][0]["text"].split(", ")) == sorted(k[:4] for k in keys)


def test_a_tasks_questions_carry_their_keys_and_only_the_keys_tasks_get_gives_answer_them(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("two_keyed_task"))["taskId"]
    deadline = time.monotonic() + WAIT
    while True:
        got = rpc.until(task_id, "input_required")
        if len(got["inputRequests"]) == 2:
            break
        assert time.monotonic() < deadline, got
        time.sleep(POLL)
    assert set(got["inputRequests"]) == {"first", "second"}
    [second] = server.query(
        "SELECT id FROM interactions WHERE run_id = :r AND input_key = 'second'", r=task_id.rpartition(".")[0]
    )
    # An answer that does not fit names its key.
    bad = rpc.task("tasks/update", task_id, inputResponses={"first": _accept(name=7)})
    assert bad["error"]["code"] == -32602 and bad["error"]["message"].startswith("first: invalid answer")
    # The question's own id was never issued on the task's wire: ignored, as the extension
    # says of any key that is not outstanding; the key answers it.
    ok = rpc.task(
        "tasks/update",
        task_id,
        inputResponses={"first": _accept(name="K"), second["id"]: _accept(name="I")},
    )
    assert rpc.result(ok) == {"resultType": "complete"}
    assert rpc.until(task_id, "input_required")["inputRequests"].keys() == {"second"}
    [row] = server.query("SELECT status FROM interactions WHERE id = :i", i=second["id"])
    assert row["status"] == "pending"
    rpc.task("tasks/update", task_id, inputResponses={"second": _accept(name="I")})
    assert rpc.until(task_id, "completed")["result"]["content"][0]["text"] == "K, I"


def test_a_key_names_one_question_over_a_tasks_life_so_a_handler_asking_under_it_again_gets_its_id(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("same_key_twice"))["taskId"]
    run_id = task_id.rpartition(".")[0]
    first = rpc.until(task_id, "input_required")["inputRequests"]
    assert list(first) == ["step"]
    assert rpc.result(rpc.task("tasks/update", task_id, inputResponses={"step": _accept(name="one")})) == {
        "resultType": "complete"
    }
    # The second question, asked under `step` too, is the task's by its id: the key was spent.
    deadline = time.monotonic() + WAIT
    while True:
        pending = server.query(
            "SELECT id, input_key FROM interactions WHERE run_id = :r AND status = 'pending'", r=run_id
        )
        if pending:
            break
        assert time.monotonic() < deadline, "the second question was never asked"
        time.sleep(POLL)
    [second] = pending
    assert second["input_key"] == "step"  # stored as the handler named it (a round would use it)
    got = rpc.until(task_id, "input_required")
    assert list(got["inputRequests"]) == [second["id"]]
    assert got["inputRequests"][second["id"]]["params"]["message"] == "Step 2"
    # A response under the spent key is ignored, as the extension says: the task still waits.
    assert rpc.result(rpc.task("tasks/update", task_id, inputResponses={"step": _accept(name="stale")})) == {
        "resultType": "complete"
    }
    assert [
        r["status"] for r in server.query("SELECT status FROM interactions WHERE id = :i", i=second["id"])
    ] == ["pending"]
    assert list(rpc.until(task_id, "input_required")["inputRequests"]) == [second["id"]]
    rpc.task("tasks/update", task_id, inputResponses={second["id"]: _accept(name="two")})
    assert rpc.until(task_id, "completed")["result"]["content"][0]["text"] == "one then two"


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65, 'quote"d', "ünï"])
def test_an_invalid_key_fails_the_run_at_the_handlers_call_and_says_why(
    server: LiveServer, key: str, bad: str
) -> None:
    rpc = Rpc(server, key, tasks=False)
    result = rpc.result(rpc.call("bad_key", {"key": bad}))
    assert result["isError"] is True and "The handler raised ValueError." in result["content"][0]["text"]
    # The message is the developer's, in the run's log with the handler's traceback.
    run_id = result["structuredContent"]["runId"]
    logged = server.query("SELECT text FROM run_events WHERE run_id = :r AND kind = 'stderr'", r=run_id)
    text = "".join(e["text"] or "" for e in logged)
    assert f"ValueError: ctx.ask() key: {bad!r} is not a valid input key" in text, text
