"""Hostile input keys (`ctx.ask(key=...)`, 2026-07-28 input rounds), client requests
(`ctx.sample`, `ctx.roots`) and rounds (`ctx.together()`): workflow code that sends the
request itself with a key, sampling params or a round the Context would refuse, a key shaped
like another question's id, a first call carrying thousands of answers ahead, another
account's sealed round state used with keys of the victim's question, and another account
answering the victim's sampling request or any question of her round.

Each is refused or ignored exactly, and no question is answered by anyone but its owner."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, Rpc
from tests.support import in_process_server
from webui.mcp.questions import keyed
from webui.store.models import Interaction

HOSTILE = str(uuid.uuid4())

HANDLERS = """
import json


def raw_sample(ctx):
    args = json.loads(ctx.params["args"])
    return ctx._chan.rpc("sample", **args)


def raw_together(ctx):
    return ctx._chan.rpc("together", **json.loads(ctx.params["args"]))


def raw_key(ctx):
    # Past the Context's own check: the request as the wire carries it.
    key = ctx.params["key"]
    return ctx._chan.rpc("ask", title="t", fields=[{"name": "v", "type": "string"}], message=None, key=key)
"""


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    manifest = {
        "id": HOSTILE,
        "name": "hostile-keys",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {
                "id": "raw_sample",
                "title": "Raw sample",
                "handler": "h.py:raw_sample",
                "task": "never",
                "params": [{"name": "args", "type": "string", "required": True}],
            },
            {
                "id": "raw_together",
                "title": "Raw together",
                "handler": "h.py:raw_together",
                "task": "never",
                "params": [{"name": "args", "type": "string", "required": True}],
            },
            {
                "id": "raw_key",
                "title": "Raw key",
                "handler": "h.py:raw_key",
                "task": "never",
                "params": [{"name": "key", "type": "string", "required": True}],
            },
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("input-key-attacks")
    with in_process_server(base) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        live.add_project(_project(base / "hostile"), HOSTILE)
        yield live


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> str:
    return server.create_key("alice-keys")


@pytest.fixture(scope="module")
def mallory(server: LiveServer) -> str:
    return server.create_key("mallory-keys")


def _accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


@pytest.mark.parametrize("bad", ["x" * 65, "x" * 100_000, "a b", "../etc", "é", ""])
def test_a_key_sent_past_the_context_fails_the_run_and_asks_nothing(
    server: LiveServer, alice: str, bad: str
) -> None:
    rpc = Rpc(server, alice, tasks=False, project=HOSTILE)
    result = rpc.result(rpc.call("raw_key", {"key": bad}))
    assert result["isError"] is True and result["structuredContent"]["status"] == "failed", result
    assert result["structuredContent"]["error"] == {
        "code": "handler_error",
        "message": "The handler raised RuntimeError.",
    }
    # The refusal is in the run's log, the key shown by its start only.
    logged = server.query(
        "SELECT text FROM run_events WHERE run_id = :r AND kind = 'stderr'",
        r=result["structuredContent"]["runId"],
    )
    text = "".join(e["text"] or "" for e in logged)
    assert "is not a valid input key" in text and len(text) < 5_000, text[:300]
    rows = server.query(
        "SELECT i.id FROM interactions i JOIN runs r ON r.id = i.run_id WHERE r.project_id = :p", p=HOSTILE
    )
    assert rows == []


def _question(iid: str, key: str | None) -> Interaction:
    return cast(Interaction, SimpleNamespace(id=iid, input_key=key))


def test_a_key_that_names_another_question_of_the_round_cannot_shadow_it() -> None:
    honest = _question("int_aaaaaaaaaaaaaaaa", None)
    shadow = _question("int_bbbbbbbbbbbbbbbb", "int_aaaaaaaaaaaaaaaa")
    for order in ((honest, shadow), (shadow, honest)):
        round_ = keyed(*order)
        assert round_["int_aaaaaaaaaaaaaaaa"] is honest
        assert round_["int_bbbbbbbbbbbbbbbb"] is shadow
    # Two under one key: the later is named by its id; a key equal to its own id is itself.
    a, b = _question("int_1", "same"), _question("int_2", "same")
    assert keyed(a, b) == {"same": a, "int_2": b}
    own = _question("int_3", "int_3")
    assert keyed(own) == {"int_3": own}


def test_thousands_of_answers_ahead_answer_only_the_question_they_name(
    server: LiveServer, alice: str
) -> None:
    rpc = Rpc(server, alice, tasks=False)
    tool = "test_input_required_result_tampered_state"
    ahead = {f"k{n}": _accept(ok=True) for n in range(5000)}
    asked = rpc.result(rpc.call(tool, inputResponses=ahead))
    assert asked["resultType"] == "input_required" and set(asked["inputRequests"]) == {"confirm"}
    ahead["confirm"] = _accept(ok=True)
    done = rpc.result(rpc.call(tool, inputResponses=ahead))
    assert done["content"][0]["text"] == "confirmed=True"


def test_another_accounts_round_state_cannot_answer_her_keyed_question(
    server: LiveServer, alice: str, mallory: str
) -> None:
    tool = "test_input_required_result_elicitation"
    victim = Rpc(server, alice, tasks=False)
    asked = victim.result(victim.call(tool))
    [row] = server.query(
        "SELECT i.id FROM interactions i JOIN runs r ON r.id = i.run_id"
        " WHERE r.entrypoint_id = :e AND i.status = 'pending' ORDER BY i.created_at DESC LIMIT 1",
        e=tool,
    )
    thief = Rpc(server, mallory, tasks=False)
    for responses in ({"user_name": _accept(name="Mallory")}, {row["id"]: _accept(name="Mallory")}):
        stolen = thief.call(tool, inputResponses=responses, requestState=asked["requestState"])
        assert stolen["error"]["code"] == -32602, stolen
    [still] = server.query("SELECT status, answer FROM interactions WHERE id = :i", i=row["id"])
    assert still["status"] == "pending"
    done = victim.result(
        victim.call(
            tool, inputResponses={"user_name": _accept(name="Alice")}, requestState=asked["requestState"]
        )
    )
    assert done["content"][0]["text"] == "Hello, Alice!"


def test_a_round_state_replayed_on_another_tool_answers_nothing_and_runs_nothing(
    server: LiveServer, alice: str
) -> None:
    tool = "test_input_required_result_elicitation"
    rpc = Rpc(server, alice, tasks=False)
    asked = rpc.result(rpc.call(tool))
    runs_before = server.query("SELECT count(*) AS n FROM runs")[0]["n"]
    for other in ("test_input_required_result_request_state", "test_simple_text"):
        replayed = rpc.call(
            other, inputResponses={"user_name": _accept(name="Elsewhere")}, requestState=asked["requestState"]
        )
        error = replayed["error"]
        assert (error["code"], error["message"]) == (-32602, "Invalid or expired requestState"), replayed
    assert server.query("SELECT count(*) AS n FROM runs")[0]["n"] == runs_before
    done = rpc.result(
        rpc.call(
            tool, inputResponses={"user_name": _accept(name="Alice")}, requestState=asked["requestState"]
        )
    )
    assert done["content"][0]["text"] == "Hello, Alice!"


TEXT = {"role": "user", "content": {"type": "text", "text": "hi"}}


@pytest.mark.parametrize(
    "args",
    [
        {"prompt": "", "max_tokens": 10},
        {"prompt": None, "max_tokens": 10},
        {"prompt": "hi", "max_tokens": 0},
        {"prompt": "hi", "max_tokens": True},
        {"prompt": "hi", "max_tokens": 10**12},
        {"messages": [TEXT] * 101, "max_tokens": 10},
        {"messages": "not a list", "max_tokens": 10},
        {"messages": [{"role": "system", "content": "x"}], "max_tokens": 10},
        {"messages": [TEXT], "max_tokens": 10, "key": "../bad"},
    ],
    ids=lambda a: json.dumps(a)[:40],
)
def test_a_sampling_request_the_context_would_refuse_fails_the_run_and_asks_nothing(
    server: LiveServer, alice: str, args: dict[str, Any]
) -> None:
    rpc = Rpc(server, alice, tasks=False, project=HOSTILE)
    rpc.caps = {"sampling": {}}
    result = rpc.result(rpc.call("raw_sample", {"args": json.dumps(args)}))
    assert result["isError"] is True and result["structuredContent"]["status"] == "failed", result
    run_id = result["structuredContent"]["runId"]
    assert server.query("SELECT id FROM interactions WHERE run_id = :r", r=run_id) == []
    logged = server.query("SELECT text FROM run_events WHERE run_id = :r AND kind = 'stderr'", r=run_id)
    assert "RuntimeError: ctx.sample()" in "".join(e["text"] or "" for e in logged)


def test_another_account_cannot_answer_a_tasks_sampling_request(
    server: LiveServer, alice: str, mallory: str
) -> None:
    victim = Rpc(server, alice)
    victim.caps = {"sampling": {}, "extensions": victim.caps["extensions"]}
    task_id = victim.result(victim.call("sample_task", {"prompt": "secret"}))["taskId"]
    [iid] = victim.until(task_id, "input_required")["inputRequests"]
    thief = Rpc(server, mallory)
    thief.caps = dict(victim.caps)
    answer = {
        "role": "assistant",
        "content": {"type": "text", "text": "x"},
        "model": "m",
        "stopReason": "endTurn",
    }
    stolen = thief.task("tasks/update", task_id, inputResponses={iid: answer})
    assert stolen["error"] == {"code": -32602, "message": "Unknown task"}, stolen
    assert thief.task("tasks/get", task_id)["error"]["message"] == "Unknown task"
    [row] = server.query("SELECT status FROM interactions WHERE id = :i", i=iid)
    assert row["status"] == "pending"
    victim.task("tasks/cancel", task_id)


ASK = {"op": "ask", "args": {"title": "t", "fields": [{"name": "v", "type": "string"}]}}


def _keyed(op: dict[str, Any], key: str) -> dict[str, Any]:
    return {"op": op["op"], "args": {**op["args"], "key": key}}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({}, "at least one question"),
        ({"requests": []}, "at least one question"),
        ({"requests": "ask"}, "at least one question"),
        ({"requests": [ASK] * 17}, "at most 16 questions"),
        ({"requests": [ASK] * 5_000}, "at most 16 questions"),
        ({"requests": [{"op": "kv.get", "args": {"key": "k"}}]}, "a round's requests are"),
        ({"requests": [{"op": "together", "args": {"requests": [ASK]}}]}, "a round's requests are"),
        ({"requests": [{"op": "ask", "args": "x"}]}, "a round's requests are"),
        ({"requests": ["ask"]}, "a round's requests are"),
        ({"requests": [_keyed(ASK, "a"), {"op": "roots", "args": {"key": "a"}}]}, "given twice"),
        ({"requests": [ASK, _keyed(ASK, "../x")]}, "is not a valid input key"),
        ({"requests": [ASK, {"op": "sample", "args": {"prompt": ""}}]}, "ctx.sample()"),
    ],
    ids=lambda a: json.dumps(a)[:40] if isinstance(a, dict) else None,
)
def test_a_round_the_context_would_refuse_fails_the_run_and_asks_nothing(
    server: LiveServer, alice: str, args: dict[str, Any], why: str
) -> None:
    rpc = Rpc(server, alice, tasks=False, project=HOSTILE)
    rpc.caps = {"elicitation": {}, "sampling": {}, "roots": {}}
    result = rpc.result(rpc.call("raw_together", {"args": json.dumps(args)}))
    assert result["isError"] is True and result["structuredContent"]["status"] == "failed", result
    run_id = result["structuredContent"]["runId"]
    # Nothing of the round was stored: a bad question anywhere refuses the whole round.
    assert server.query("SELECT id FROM interactions WHERE run_id = :r", r=run_id) == []
    logged = server.query("SELECT text FROM run_events WHERE run_id = :r AND kind = 'stderr'", r=run_id)
    text = "".join(e["text"] or "" for e in logged)
    assert why in text and len(text) < 10_000, text[:300]


def test_another_account_cannot_answer_any_question_of_her_round(
    server: LiveServer, alice: str, mallory: str
) -> None:
    tool = "together_or_refusal"
    victim = Rpc(server, alice, tasks=False)
    victim.caps = {"elicitation": {}, "sampling": {}, "roots": {}}
    asked = victim.result(victim.call(tool))
    assert set(asked["inputRequests"]) == {"user_name", "greeting", "client_roots"}
    thief = Rpc(server, mallory, tasks=False)
    thief.caps = dict(victim.caps)
    stolen = thief.call(
        tool,
        inputResponses={"client_roots": {"roots": [{"uri": "file:///evil"}]}},
        requestState=asked["requestState"],
    )
    assert stolen["error"]["code"] == -32602, stolen
    rows = server.query(
        "SELECT i.status FROM interactions i JOIN runs r ON r.id = i.run_id"
        " WHERE r.entrypoint_id = :e AND r.status = 'waiting_for_input'",
        e=tool,
    )
    assert [r["status"] for r in rows] == ["pending"] * 3
