"""Attack pass 2 (tasks) against a real `steamharness serve`: a configuration secret at the
cut of a progress message, keys of a task's questions as different pollers see them, and
races (tasks/update against the browser, tasks/cancel against the run's own end, polls
without sampling against the owner's sampling answer).

The holes it found are fixed (their tests check the fix); the others are what held."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import TASKS, Rpc, _run_id
from tests.helpers import WAIT
from tests.security.handler_project import entry as _any_entry
from tests.security.handler_project import serving, until

PROJECT = "5b0e2f7a-8c41-4d9e-a3b6-1f2e3d4c5b6a"


def entry(name: str, params: list[dict[str, Any]] | None = None, task: str = "required") -> dict[str, Any]:
    return _any_entry(name, params, task=task, timeout_seconds=60)


TOKEN = "tok-SECRETPREFIX-0123456789abcdefXYZ"
PROGRESS_LIMIT = 4096  # webui.runs.messages.PROGRESS_MESSAGE_LIMIT
SAMPLED = {
    "role": "assistant",
    "content": {"type": "text", "text": "Hi"},
    "model": "m",
    "stopReason": "endTurn",
}

HANDLERS = r"""
import threading
import time


def progress_secret(ctx):
    ctx.progress(0, None, "x" * int(ctx.params["pad"]) + ctx.config["token"])
    time.sleep(60)
    return "slept"


def confirm(ctx):
    answer = ctx.ask("Number?", [{"name": "n", "type": "integer", "required": True}])
    return f"n={answer['n'] if answer else None}"


def short(ctx):
    ctx.progress(0, 1, "working")
    time.sleep(float(ctx.params["seconds"]))
    return "done"


def sample_once(ctx):
    try:
        return {"result": ctx.sample("hi", max_tokens=5)}
    except RuntimeError as exc:
        return {"refused": str(exc)}


def form_then_sample_same_key(ctx):
    got = {}

    def ask():
        got["form"] = ctx.ask("Name?", [{"name": "name", "type": "string", "required": True}], key="k")

    def sample():
        try:
            got["sample"] = ctx.sample("hi", max_tokens=5, key="k")
        except RuntimeError as exc:
            got["sample"] = str(exc)

    first = threading.Thread(target=ask)
    first.start()
    time.sleep(0.5)  # the form is asked first
    second = threading.Thread(target=sample)
    second.start()
    first.join()
    second.join()
    return "both"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serving(
        tmp_path_factory.mktemp("attack-pass2-tasks"),
        project_id=PROJECT,
        name="attack-pass2-tasks",
        handlers=HANDLERS,
        entrypoints=[
            entry("progress_secret", [{"name": "pad", "type": "number", "required": True}], task="optional"),
            entry("confirm"),
            entry("short", [{"name": "seconds", "type": "number", "required": True}]),
            entry("sample_once"),
            entry("form_then_sample_same_key"),
        ],
    ) as live:
        yield live


def _rpc(server: LiveServer, key: str, caps: dict[str, Any] | None = None) -> Rpc:
    rpc = Rpc(server, key, project=PROJECT)
    if caps is not None:
        rpc.caps = {**caps, "extensions": {TASKS: {}}}
    return rpc


def _pending(server: LiveServer, run_id: str) -> list[dict[str, Any]]:
    return server.query(
        "SELECT id, kind, status FROM interactions"
        " WHERE run_id = :r AND status = 'pending' ORDER BY created_at",
        r=run_id,
    )


def _answered_audits(server: LiveServer, interaction_id: str) -> list[dict[str, Any]]:
    rows = server.query("SELECT * FROM audit_events WHERE event = 'interaction.answered'")
    found = []
    for row in rows:
        details = row["details"] if isinstance(row["details"], dict) else json.loads(row["details"] or "{}")
        if details.get("interactionId") == interaction_id:
            found.append(row)
    return found


def _set_secret(server: LiveServer, key: str, value: str) -> None:
    base = f"/api/workflows/{PROJECT}/configs"
    with httpx2.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    ) as api:
        etag = api.get(f"{base}/default").headers["etag"]
        saved = api.patch(f"{base}/default", headers={"If-Match": etag}, json={"values": {"token": value}})
        assert saved.status_code == 200, saved.text


# --------------------------------------------------------------------------- secrets


def test_a_secret_straddling_the_progress_message_cut_never_reaches_a_poll(server: LiveServer) -> None:
    key = server.create_key("pass2-secret", scopes=["runs.create", "runs.read", "configs"])
    _set_secret(server, key, TOKEN)
    rpc = _rpc(server, key)
    pad = PROGRESS_LIMIT - 16  # the cut falls 16 characters into the secret
    created = rpc.result(rpc.call("progress_secret", {"pad": pad}))
    assert created["resultType"] == "task", created
    task_id = created["taskId"]
    try:

        def polled() -> str | None:
            got = rpc.result(rpc.task("tasks/get", task_id))
            return got.get("statusMessage")

        message = until(polled, "the task never showed its progress message")
        # The control: a whole secret in a progress message is redacted (checked elsewhere);
        # here no part of it of any length worth hiding may show.
        assert TOKEN[:16] not in message, message[-40:]
    finally:
        rpc.task("tasks/cancel", task_id)


# --------------------------------------------------------------------------- keys


def test_a_key_names_one_request_whatever_the_pollers_capabilities(server: LiveServer) -> None:
    key = server.create_key("pass2-keys")
    full = _rpc(server, key, {"elicitation": {}, "sampling": {}})
    task_id = full.result(full.call("form_then_sample_same_key"))["taskId"]
    try:

        def both() -> dict[str, Any] | None:
            got = full.result(full.task("tasks/get", task_id))
            asked = got.get("inputRequests") or {}
            return asked if len(asked) == 2 else None

        asked = until(both, "the form and the sampling request were never both pending")
        assert asked["k"]["method"] == "elicitation/create", asked  # the form came first
        sampling_only = _rpc(server, key, {"sampling": {}})
        seen = sampling_only.result(sampling_only.task("tasks/get", task_id))["inputRequests"]
        by_method = {r["method"]: k for k, r in seen.items()}
        # The sampling request must go by the key it was given on this task: its id, not "k".
        assert by_method["sampling/createMessage"] != "k", seen
    finally:
        full.task("tasks/cancel", task_id)


# --------------------------------------------------------------------------- races


def test_tasks_update_racing_a_browser_answer_records_exactly_one_answer(server: LiveServer) -> None:
    key = server.create_key("pass2-race-browser")
    rpc = _rpc(server, key)
    for attempt in range(3):
        task_id = rpc.result(rpc.call("confirm"))["taskId"]
        [question] = rpc.until(task_id, "input_required")["inputRequests"]
        interaction_id = question  # no handler key: the id

        def by_task(task_id: str, interaction_id: str, n: int) -> Any:
            mine = _rpc(server, key)
            answer = {"action": "accept", "content": {"n": n}}
            return mine.task("tasks/update", task_id, inputResponses={interaction_id: answer})

        def by_browser(interaction_id: str, n: int) -> Any:
            return httpx2.post(
                f"{server.base_url}/api/interactions/{interaction_id}/answer",
                json={"action": "accept", "content": {"n": n}},
                headers={"Authorization": f"Bearer {key}"},
                timeout=WAIT,
            )

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(by_task, task_id, interaction_id, n) for n in range(1, 5)]
            futures += [pool.submit(by_browser, interaction_id, n) for n in range(5, 9)]
            replies = [f.result() for f in futures]
        for reply in replies[:4]:
            assert "result" in reply, reply  # the task's answers: acknowledged, never a 5xx
        for reply in replies[4:]:
            assert reply.status_code in (200, 409), (reply.status_code, reply.text)
        done = rpc.until(task_id, "completed")
        text = done["result"]["structuredContent"]["output"]
        [row] = server.query("SELECT status, answer FROM interactions WHERE id = :i", i=interaction_id)
        stored = row["answer"] if isinstance(row["answer"], dict) else json.loads(row["answer"])
        assert row["status"] == "answered" and text == f"n={stored['n']}", (row, text, attempt)
        assert len(_answered_audits(server, interaction_id)) == 1


def test_tasks_cancel_racing_the_runs_own_end_never_changes_a_terminal_status(server: LiveServer) -> None:
    key = server.create_key("pass2-race-cancel")
    rpc = _rpc(server, key)
    for seconds in (0.3, 0.5, 0.7):
        task_id = rpc.result(rpc.call("short", {"seconds": seconds}))["taskId"]
        first: str | None = None
        deadline = time.monotonic() + WAIT
        with ThreadPoolExecutor(4) as pool:
            while first is None:
                assert time.monotonic() < deadline, "the task never ended"
                cancels = [pool.submit(_rpc(server, key).task, "tasks/cancel", task_id) for _ in range(3)]
                got = rpc.result(rpc.task("tasks/get", task_id))
                for c in cancels:
                    assert "result" in c.result()
                if got["status"] in ("completed", "cancelled", "failed"):
                    first = got["status"]
        for _ in range(5):
            assert "result" in rpc.task("tasks/cancel", task_id)
            again = rpc.result(rpc.task("tasks/get", task_id))
            assert again["status"] == first, (first, again)
        [run] = server.query("SELECT status FROM runs WHERE id = :r", r=_run_id(task_id))
        expected = {"completed": "success", "cancelled": "cancelled"}[first]
        assert run["status"] == expected, (first, run)


def test_polls_without_sampling_racing_the_owners_sampling_answer_record_one_answer(
    server: LiveServer,
) -> None:
    key = server.create_key("pass2-race-sampling")
    sampler = _rpc(server, key, {"sampling": {}})
    for _ in range(3):
        task_id = sampler.result(sampler.call("sample_once"))["taskId"]
        [(request_key, request)] = sampler.until(task_id, "input_required")["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        [row] = _pending(server, _run_id(task_id))

        def plain_poll(task_id: str) -> Any:
            return _rpc(server, key, {}).task("tasks/get", task_id)

        def answer(task_id: str, request_key: str) -> Any:
            return _rpc(server, key, {"sampling": {}}).task(
                "tasks/update", task_id, inputResponses={request_key: SAMPLED}
            )

        with ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(plain_poll, task_id),
                pool.submit(answer, task_id, request_key),
                pool.submit(plain_poll, task_id),
            ]
            for f in futures:
                assert "result" in f.result(), f.result()
        done = sampler.until(task_id, "completed")
        out = done["result"]["structuredContent"]["output"]
        [stored] = server.query("SELECT status, action, channel FROM interactions WHERE id = :i", i=row["id"])
        assert stored["status"] == "answered"
        # The handler got exactly what was recorded: the sample, or the refusal, never both.
        if stored["action"] == "accept":
            assert out["result"]["content"]["text"] == "Hi", out
        else:
            assert stored["channel"] == "mcp-undeclared" and "refused" in out, (stored, out)
        assert len(_answered_audits(server, row["id"])) == 1
