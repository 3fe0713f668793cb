"""Rounds (`ctx.together()`), client requests (`ctx.sample`/`ctx.roots`) and MCP tasks
driven by a hostile handler and racing clients, against a real server: a run cannot pile up
questions (at most 16 waiting, a request id once), a question's title, message and size
are bounded before anything is stored, NaN in a worker's message is a malformed message; a
cancel mid-round, racing answers, the browser API, hostile prompt text in the pages, a
tampered round state and another account's question ids are each refused or harmless."""

from __future__ import annotations

import concurrent.futures
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import Rpc
from tests.helpers import WAIT
from tests.support import in_process_server

HOSTILE = str(uuid.uuid4())

HANDLERS = r'''
import json

ASK = {"op": "ask", "args": {"title": "t", "fields": [{"name": "v", "type": "string"}]}}


def _raw(chan, op, args_json):
    """An rpc whose args are raw JSON text (past the Context and its encoder)."""
    with chan._cond:
        chan._next_id += 1
        rid = chan._next_id
    chan.send_frame(('{"type":"rpc","id":%d,"op":"%s","args":%s}\n' % (rid, op, args_json)).encode())
    with chan._cond:
        while rid not in chan._replies:
            chan._cond.wait()
        return chan._replies.pop(rid)


def flood_rounds(ctx):
    # Many full rounds sent at once, without waiting for any answer.
    n = int(ctx.params["n"])
    with ctx._chan._cond:
        base = ctx._chan._next_id
        ctx._chan._next_id += n
    for i in range(n):
        rpc = {"type": "rpc", "id": base + 1 + i, "op": "together", "args": {"requests": [ASK] * 16}}
        ctx._chan.send(rpc)
    # A store rpc is answered after every frame before it: each round was stored or refused.
    ctx._chan.rpc("kv.get", key="sync")
    with ctx._chan._cond:
        refused = [i for i in range(base + 1, base + n + 1) if i in ctx._chan._replies]
    return {"refused": len(refused)}


def same_id(ctx):
    # Two questions under one request id: the second is refused, the first still asked.
    with ctx._chan._cond:
        ctx._chan._next_id += 1
        rid = ctx._chan._next_id
    for _ in range(2):
        ctx._chan.send({"type": "rpc", "id": rid, "op": "ask", "args": ASK["args"]})
    ctx._chan.rpc("kv.get", key="sync")
    with ctx._chan._cond:
        return {"refused": ctx._chan._replies.get(rid, {}).get("error")}


def nan_sample(ctx):
    reply = _raw(ctx._chan, "sample", '{"prompt":"hi","max_tokens":5,"temperature":NaN}')
    return {"reply": reply}


def three_task(ctx):
    with ctx.together() as r:
        a = r.ask("A?", [{"name": "v", "type": "string", "required": True}], key="a")
        b = r.ask("B?", [{"name": "v", "type": "string", "required": True}], key="b")
        c = r.ask("C?", [{"name": "v", "type": "string", "required": True}], key="c")
    return {"a": a.result(), "b": b.result(), "c": c.result()}


def too_big(ctx):
    what = ctx.params["what"]
    fields = [{"name": "v", "type": "string"}]
    if what == "title":
        return ctx.ask("T" * 1025, fields)
    if what == "message":
        return ctx.ask("t", fields, message="M" * 70_000)
    if what == "details":
        return ctx.approve("deploy", details={"x": "D" * 70_000})
    if what == "sampling":
        return ctx.sample(messages=[{"role": "user", "content": {"type": "text", "text": "S" * 60_000}}] * 20)
    fields = [{"name": f"f{i}", "type": "string", "description": "d" * 5_000} for i in range(300)]
    return ctx.ask("t", fields)


def sample_hostile(ctx):
    return ctx.sample(ctx.params["prompt"], max_tokens=5, key="s")
'''


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    ep = lambda i, task="never", params=(): {  # noqa: E731
        "id": i,
        "title": i,
        "handler": f"h.py:{i}",
        "task": task,
        "params": [{"name": p, "type": "string", "required": True} for p in params],
    }
    manifest = {
        "id": HOSTILE,
        "name": "round-attacks",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            ep("flood_rounds", params=("n",)),
            ep("nan_sample"),
            ep("three_task", task="required"),
            ep("sample_hostile", task="required", params=("prompt",)),
            ep("too_big", params=("what",)),
            ep("same_id"),
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("round-attacks")
    with in_process_server(base) as live:
        live.add_project(_project(base / "hostile"), HOSTILE)
        yield live


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> str:
    return server.create_key("alice-rounds")


@pytest.fixture(scope="module")
def mallory(server: LiveServer) -> str:
    return server.create_key("mallory-rounds")


def _rows(server: LiveServer, run_id: str) -> list[dict[str, Any]]:
    return server.query(
        "SELECT id, input_key, status, action, answer, channel FROM interactions WHERE run_id = :r"
        " ORDER BY created_at, id",
        r=run_id,
    )


def _run_of(server: LiveServer, entrypoint: str) -> str:
    [row] = server.query(
        "SELECT id FROM runs WHERE entrypoint_id = :e ORDER BY created_at DESC LIMIT 1", e=entrypoint
    )
    return str(row["id"])


# ----------------------------------------------------------------------------- findings


def _ended(server: LiveServer, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        [run] = server.query("SELECT status, output FROM runs WHERE id = :r", r=run_id)
        if run["status"] in ("success", "failed", "cancelled", "timeout"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_one_run_cannot_pile_up_questions_by_sending_rounds_without_waiting(
    server: LiveServer, alice: str
) -> None:
    """40 rounds of 16 sent at once: the first is stored, the 39 others refused (a run has
    at most 16 questions waiting), whatever the handler does with the refusals."""
    rpc = Rpc(server, alice, tasks=False, elicitation=False, project=HOSTILE)
    rpc.call("flood_rounds", {"n": "40"})
    run_id = _run_of(server, "flood_rounds")
    run = _ended(server, run_id)
    output = json.loads(run["output"]) if isinstance(run["output"], str) else run["output"]
    assert output == {"refused": 39}, run
    assert len(_rows(server, run_id)) == 16


def test_a_request_id_already_waiting_is_refused(server: LiveServer, alice: str) -> None:
    rpc = Rpc(server, alice, tasks=False, elicitation=False, project=HOSTILE)
    rpc.call("same_id")
    run_id = _run_of(server, "same_id")
    run = _ended(server, run_id)
    output = json.loads(run["output"]) if isinstance(run["output"], str) else run["output"]
    assert "is already waiting for an answer" in output["refused"], run
    assert len(_rows(server, run_id)) == 1


@pytest.mark.parametrize(
    ("what", "why"),
    [
        ("title", "title is 1,025 characters, over the 1,024"),
        ("message", "message is 70,000 characters, over the 65,536"),
        ("details", "message is"),
        ("sampling", "over the 1,048,576 it may be"),
        ("fields", "as JSON, over the 1,048,576"),
    ],
)
def test_a_questions_size_is_bounded_before_anything_is_stored(
    server: LiveServer, alice: str, what: str, why: str
) -> None:
    """Each stored question is sent again on every round and tasks/get poll: an oversized
    one fails the handler's call, and nothing of it is stored."""
    rpc = Rpc(server, alice, tasks=False, project=HOSTILE)
    rpc.caps = {"elicitation": {}, "sampling": {}}
    result = rpc.result(rpc.call("too_big", {"what": what}))
    assert result["isError"] is True and result["structuredContent"]["status"] == "failed", result
    run_id = result["structuredContent"]["runId"]
    assert _rows(server, run_id) == []
    logged = server.query("SELECT text FROM run_events WHERE run_id = :r AND kind = 'stderr'", r=run_id)
    assert why in "".join(e["text"] or "" for e in logged)


def test_a_sampling_request_with_a_nan_temperature_is_refused_by_the_server() -> None:
    from webui.errors import ProjectError
    from webui.interactions.client_requests import sampling_params

    for bad in (float("nan"), float("inf"), True, "0.5"):
        with pytest.raises(ProjectError, match="temperature: a finite number"):
            sampling_params({"prompt": "hi", "max_tokens": 5, "temperature": bad})


def test_nan_in_a_workers_message_fails_the_run_and_stores_nothing(server: LiveServer, alice: str) -> None:
    """The worker's own encoder never writes NaN; a handler writing frames itself might."""
    rpc = Rpc(server, alice, tasks=False, project=HOSTILE)
    rpc.caps = {"sampling": {}}
    result = rpc.result(rpc.call("nan_sample"))
    assert result["structuredContent"]["status"] == "failed", result
    assert result["structuredContent"]["error"]["message"] == "The worker sent a malformed message."
    assert _rows(server, result["structuredContent"]["runId"]) == []


# ----------------------------------------------------------------------------- refused / held


def test_cancel_in_the_middle_of_a_round_closes_the_rest_and_a_late_answer_changes_nothing(
    server: LiveServer, alice: str
) -> None:
    rpc = Rpc(server, alice, project=HOSTILE)
    task_id = rpc.result(rpc.call("three_task"))["taskId"]
    asked = rpc.until(task_id, "input_required")
    assert set(asked["inputRequests"]) == {"a", "b", "c"}
    ok = {"action": "accept", "content": {"v": "x"}}
    assert "result" in rpc.task("tasks/update", task_id, inputResponses={"a": ok})
    rpc.task("tasks/cancel", task_id)
    assert rpc.until(task_id, "cancelled")["status"] == "cancelled"
    late = rpc.task("tasks/update", task_id, inputResponses={"b": ok, "c": ok})
    assert "result" in late or late["error"]["code"] == -32602, late
    run_id = task_id.rpartition(".")[0]
    rows = _rows(server, run_id)
    assert [(r["input_key"], r["status"]) for r in rows] == [
        ("a", "answered"),
        ("b", "closed"),
        ("c", "closed"),
    ]


def test_racing_answers_to_one_round_record_one_answer_each_and_the_handler_gets_those(
    server: LiveServer, alice: str
) -> None:
    rpc = Rpc(server, alice, project=HOSTILE)
    task_id = rpc.result(rpc.call("three_task"))["taskId"]
    rpc.until(task_id, "input_required")

    def update(tag: str) -> dict[str, Any]:
        mine = Rpc(server, alice, project=HOSTILE)
        answers = {k: {"action": "accept", "content": {"v": f"{tag}-{k}"}} for k in ("c", "b", "a")}
        return mine.task("tasks/update", task_id, inputResponses=answers)

    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(update, [f"t{i}" for i in range(6)]))
    assert all("result" in r for r in results), results
    done = rpc.until(task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    out = done["result"]["structuredContent"]
    run_id = task_id.rpartition(".")[0]
    rows = {r["input_key"]: r for r in _rows(server, run_id)}
    assert all(rows[k]["status"] == "answered" for k in "abc")
    got = out.get("output", out)
    for k in "abc":
        assert (
            got[k] == json.loads(rows[k]["answer"])
            if isinstance(rows[k]["answer"], str)
            else rows[k]["answer"]
        )


def test_a_sampling_request_cannot_be_answered_through_the_api_even_by_an_admin_override(
    server: LiveServer, alice: str
) -> None:
    import httpx2

    rpc = Rpc(server, alice, project=HOSTILE)
    rpc.caps = {"sampling": {}, "extensions": rpc.caps["extensions"]}
    task_id = rpc.result(rpc.call("sample_hostile", {"prompt": "hi"}))["taskId"]
    rpc.until(task_id, "input_required")
    run_id = task_id.rpartition(".")[0]
    [row] = _rows(server, run_id)
    result = {
        "role": "assistant",
        "content": {"type": "text", "text": "x"},
        "model": "m",
        "stopReason": "endTurn",
    }
    for key, body in (
        (alice, {"action": "accept", "content": result}),
        (alice, {"action": "decline"}),
        (server.admin_key, {"action": "accept", "content": result, "override": True}),
        (server.admin_key, {"action": "decline", "override": True}),
    ):
        r = httpx2.post(
            f"{server.base_url}/api/interactions/{row['id']}/answer",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=WAIT,
        )
        assert r.status_code >= 400, (r.status_code, r.text)
    [still] = _rows(server, run_id)
    assert still["status"] == "pending"
    rpc.task("tasks/cancel", task_id)


def test_a_hostile_sampling_prompt_is_shown_escaped_in_the_browser(server: LiveServer) -> None:
    import httpx2

    password = "round-attacks-password-1"
    server.add_user("ann-rounds", password=password)
    server.grant("ann-rounds", all_projects=True)
    raw = server.create_key("ann-rounds")
    evil = '<img src=x onerror=alert(1)><script>alert(2)</script>" hx-get="/x'
    rpc = Rpc(server, raw, project=HOSTILE)
    rpc.caps = {"sampling": {}, "extensions": rpc.caps["extensions"]}
    task_id = rpc.result(rpc.call("sample_hostile", {"prompt": evil}))["taskId"]
    got = rpc.until(task_id, "input_required")
    assert got["inputRequests"]["s"]["params"]["messages"][0]["content"]["text"] == evil
    run_id = task_id.rpartition(".")[0]
    with httpx2.Client(base_url=server.base_url, timeout=WAIT, headers={"Origin": server.base_url}) as http:
        _check_pages(http, password, run_id, evil)
    rpc.task("tasks/cancel", task_id)


def _check_pages(http: Any, password: str, run_id: str, evil: str) -> None:
    import html
    import re

    token = re.search(r'name="csrf_token" value="([^"]+)"', http.get("/login").text)
    assert token
    r = http.post(
        "/login", data={"username": "ann-rounds", "password": password, "csrf_token": token.group(1)}
    )
    assert r.status_code == 303, r.text
    pages = [http.get(path) for path in ("/inbox", f"/runs/{run_id}", f"/runs/{run_id}/timeline")]
    for page in pages:
        assert page.status_code == 200, (page.url, page.status_code)
        assert "<img src=x" not in page.text and "<script>alert(2)" not in page.text, page.url
    assert any(
        html.escape(evil[:40], quote=False) in p.text or html.escape(evil[:40]) in p.text for p in pages
    )


def test_a_round_state_is_bound_to_its_tool_and_a_tampered_one_is_refused(
    server: LiveServer, alice: str
) -> None:
    rpc = Rpc(server, alice, tasks=False, project=HOSTILE)
    asked = rpc.result(rpc.call("flood_rounds", {"n": "1"}))
    state = asked["requestState"]
    key = next(iter(asked["inputRequests"]))
    answer = {key: {"action": "accept", "content": {"v": "x"}}}
    # The same state on another tool of the project, with other arguments, or flipped.
    other = rpc.call("nan_sample", inputResponses=answer, requestState=state)
    args = rpc.call("flood_rounds", {"n": "2"}, inputResponses=answer, requestState=state)
    flipped = state[:-2] + ("A" if state[-2] != "A" else "B") + state[-1]
    tampered = rpc.call("flood_rounds", {"n": "1"}, inputResponses=answer, requestState=flipped)
    for refused in (other, args, tampered):
        assert refused.get("error", {}).get("code") == -32602, refused
    run_id = _run_of(server, "flood_rounds")
    assert all(r["status"] != "answered" for r in _rows(server, run_id))


def test_another_accounts_question_ids_in_my_own_task_update_answer_nothing(
    server: LiveServer, alice: str, mallory: str
) -> None:
    victim = Rpc(server, alice, project=HOSTILE)
    v_task = victim.result(victim.call("three_task"))["taskId"]
    victim.until(v_task, "input_required")
    v_rows = _rows(server, v_task.rpartition(".")[0])
    thief = Rpc(server, mallory, project=HOSTILE)
    t_task = thief.result(thief.call("three_task"))["taskId"]
    thief.until(t_task, "input_required")
    stolen = {r["id"]: {"action": "accept", "content": {"v": "mallory"}} for r in v_rows}
    got = thief.task("tasks/update", t_task, inputResponses=stolen)
    assert "result" in got, got
    assert all(r["status"] == "pending" for r in _rows(server, v_task.rpartition(".")[0]))
    # Her own task's questions untouched too.
    assert all(r["status"] == "pending" for r in _rows(server, t_task.rpartition(".")[0]))
    victim.task("tasks/cancel", v_task)
    thief.task("tasks/cancel", t_task)
