"""MCP tasks (the tasks extension, 2026-07-28) against a real `steamharness serve`, with the
conformance fixture project (tests/conformance/project): calls that become tasks, tasks/get,
tasks/update (and the browser answering a task's question), tasks/cancel, the errors of
each, ownership, the audit trail and the run's timeline, and a restart mid-task.

Requests are plain stateless 2026-07-28 POSTs (no session), as a client of the extension
sends them; every wait polls what it asserts, bounded by WAIT."""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server
from tests.support.waiting import eventually

FIXTURE = "6e089096-632c-488b-9d0d-69e768d26fad"
FIXTURE_DIR = Path(__file__).resolve().parents[1] / "conformance" / "project"
MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
POLL = 0.05


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("tasks")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("tasker")


class Rpc:
    """One client of the extension: its key, whether it declares tasks, and the target it
    calls (the draft unless told)."""

    def __init__(
        self,
        server: LiveServer,
        key: str,
        *,
        tasks: bool = True,
        elicitation: bool = True,
        project: str = FIXTURE,
        target: str = "draft",
    ) -> None:
        self.server = server
        self.project = project
        self.target = target
        self.key = key
        caps: dict[str, Any] = {}
        if elicitation:
            caps["elicitation"] = {}
        if tasks:
            caps["extensions"] = {TASKS: {}}
        self.caps = caps
        self.next_id = 0
        self.extra_meta: dict[str, Any] = {}  # more `_meta` for every request (a traceparent, say)

    def post(
        self, method: str, params: dict[str, Any], *, name: str | None = None, **headers: str
    ) -> dict[str, Any]:
        self.next_id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": self.caps,
            **self.extra_meta,
        }
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": meta}}
        sent = {
            "Authorization": f"Bearer {self.key}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        if name is not None:
            sent["Mcp-Name"] = name
        sent.update(headers)
        r = httpx2.post(self.server.mcp_url(self.project, self.target), json=body, headers=sent, timeout=WAIT)
        message = _message(r)
        assert message.get("id") == self.next_id, message
        return message

    def call(self, tool: str, arguments: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        return self.post("tools/call", {"name": tool, "arguments": arguments or {}, **extra}, name=tool)

    def task(self, method: str, task_id: str, **params: Any) -> dict[str, Any]:
        return self.post(method, {"taskId": task_id, **params}, name=task_id)

    def result(self, message: dict[str, Any]) -> dict[str, Any]:
        """The result, without the `_meta` every 2026-07-28 result carries (serverInfo)."""
        assert "result" in message, message
        result = dict(message["result"])
        assert result.pop("_meta")["io.modelcontextprotocol/serverInfo"]["name"].startswith("workflow-")
        return result

    def until(self, task_id: str, *statuses: str) -> dict[str, Any]:
        def polled() -> dict[str, Any] | None:
            got = self.result(self.task("tasks/get", task_id))
            return got if got["status"] in statuses else None

        return eventually(polled, f"task {task_id} {' or '.join(statuses)}", interval=POLL)


def _message(r: httpx2.Response) -> dict[str, Any]:
    import json

    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    found = [
        json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]
    replies = [m for m in found if "id" in m and "method" not in m]
    assert replies, r.text
    return replies[-1]


def confirm_in_browser_api(server: LiveServer, key: str, question: str) -> None:
    """The question's `confirm` ticked and accepted through the JSON API the browser uses."""
    r = httpx2.post(
        f"{server.base_url}/api/interactions/{question}/answer",
        json={"action": "accept", "content": {"confirm": True}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text


def _audit(server: LiveServer, event: str) -> list[dict[str, Any]]:
    return server.query("SELECT * FROM audit_events WHERE event = :e ORDER BY id", e=event)


def _run_id(task_id: str) -> str:
    return task_id.rpartition(".")[0]


# --------------------------------------------------------------------------- becoming a task


def test_an_optional_tool_that_reports_progress_becomes_a_task_and_completes_with_its_exact_result(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    created = rpc.result(rpc.call("slow_compute", {"seconds": 1, "label": "first"}))
    assert created["resultType"] == "task" and created["status"] == "working"
    assert set(created) >= {"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
    assert not {"result", "error", "inputRequests", "requestState"} & set(created)
    task_id = created["taskId"]

    done = rpc.until(task_id, "completed")
    assert done["resultType"] == "complete" and done["taskId"] == task_id
    result = done["result"]
    assert result["isError"] is False
    assert result["content"] == [{"type": "text", "text": "first: computed in 1 s"}]
    assert result["structuredContent"]["output"] == "first: computed in 1 s"
    assert result["structuredContent"]["runId"] == _run_id(task_id)
    assert "pollIntervalMs" not in done

    # The call's audit says it became a task; the run's timeline says so too.
    [event] = [e for e in _audit(server, "tool.task_created") if e["run_id"] == _run_id(task_id)]
    assert event["tool"] == "slow_compute" and event["outcome"] == "task"
    kinds = [
        r["kind"] for r in server.query("SELECT kind FROM run_events WHERE run_id = :r", r=_run_id(task_id))
    ]
    assert "task" in kinds


def test_the_run_page_and_the_audit_log_show_a_person_that_the_call_became_a_task(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 1, "label": "shown"}))["taskId"]
    rpc.until(task_id, "completed")
    server.add_user("task-admin", admin=True, password="task-admin-password-1")
    with httpx2.Client(base_url=server.base_url, timeout=WAIT) as browser:
        token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
        assert token
        login = {"username": "task-admin", "password": "task-admin-password-1", "csrf_token": token.group(1)}
        assert browser.post("/login", data=login, follow_redirects=False).status_code == 303
        page = browser.get(f"/runs/{_run_id(task_id)}")
        assert page.status_code == 200
        assert "The MCP call became a task: its client follows the run with tasks/get." in page.text
        audit = browser.get("/admin/audit", params={"event": "tool.task_created"})
        assert audit.status_code == 200 and _run_id(task_id) in audit.text


def test_a_quick_optional_call_is_answered_in_the_call_and_a_client_without_tasks_never_gets_one(
    server: LiveServer, key: str
) -> None:
    quick = Rpc(server, key).result(Rpc(server, key).call("slow_compute", {"seconds": 0, "label": "q"}))
    assert quick["resultType"] == "complete" and "taskId" not in quick
    plain = Rpc(server, key, tasks=False)
    slow = plain.result(plain.call("slow_compute", {"seconds": 1, "label": "sync"}))
    assert slow["resultType"] == "complete" and slow["content"][0]["text"] == "sync: computed in 1 s"


def test_a_required_tool_without_the_extension_is_refused_with_the_capability_it_needs(
    server: LiveServer, key: str
) -> None:
    plain = Rpc(server, key, tasks=False)
    refused = plain.call("failing_job")
    assert refused["error"]["code"] == -32021
    assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    before = server.query("SELECT count(*) AS n FROM runs WHERE entrypoint_id = 'failing_job'")[0]["n"]
    assert plain.call("failing_job")["error"]["code"] == -32021
    after = server.query("SELECT count(*) AS n FROM runs WHERE entrypoint_id = 'failing_job'")[0]["n"]
    assert after == before  # nothing was run


def test_a_handler_error_is_completed_with_is_error_and_a_dead_worker_is_failed(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    failing = rpc.result(rpc.call("failing_job"))["taskId"]
    done = rpc.until(failing, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["isError"] is True
    assert done["result"]["structuredContent"]["error"]["code"] == "business_error"

    dying = rpc.result(rpc.call("protocol_error_job"))["taskId"]
    failed = rpc.until(dying, "completed", "failed")
    assert failed["status"] == "failed" and "result" not in failed
    assert failed["error"]["code"] == -32603 and failed["error"]["data"] == {"code": "worker_crashed"}
    assert "exited with code 3" in failed["error"]["message"]
    assert failed["statusMessage"] == failed["error"]["message"]  # the diagnostic, not stale progress


def test_a_required_tool_names_every_capability_the_client_lacks_in_one_audited_refusal(
    server: LiveServer, key: str
) -> None:
    plain = Rpc(server, key, tasks=False)
    refused = plain.call("sample_task_requiring")["error"]
    assert refused["code"] == -32021
    assert refused["data"] == {"requiredCapabilities": {"sampling": {}, "extensions": {TASKS: {}}}}
    assert "sampling" in refused["message"] and TASKS in refused["message"]
    # Declaring the extension alone still leaves sampling missing.
    tasks_only = Rpc(server, key)
    assert tasks_only.call("sample_task_requiring")["error"]["data"] == {
        "requiredCapabilities": {"sampling": {}}
    }
    audits = [e for e in _audit(server, "tool.failed") if e["tool"] == "sample_task_requiring"]
    assert [a["outcome"] for a in audits] == ["capability_required"] * 2
    assert [json.loads(a["details"])["requires"] for a in audits] == [["sampling", TASKS], ["sampling"]]
    assert (
        server.query("SELECT count(*) AS n FROM runs WHERE entrypoint_id = 'sample_task_requiring'")[0]["n"]
        == 0
    )


def test_a_task_whose_tool_left_the_catalog_keeps_its_status_and_result(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(FIXTURE_DIR, project)
    with running_server(tmp_path / "server") as live:
        live.add_project(project, FIXTURE)
        rpc = Rpc(live, live.create_key("leaver"))
        task_id = rpc.result(rpc.call("slow_compute", {"seconds": 1, "label": "gone"}))["taskId"]
        done = rpc.until(task_id, "completed")
        # The draft changes: the tool is gone from the catalog a new request binds to.
        manifest = json.loads((project / "package.json").read_text(encoding="utf-8"))
        manifest["entrypoints"] = [e for e in manifest["entrypoints"] if e["id"] != "slow_compute"]
        (project / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
        listed = rpc.result(rpc.post("tools/list", {}))
        assert "slow_compute" not in {t["name"] for t in listed["tools"]}
        again = rpc.result(rpc.task("tasks/get", task_id))
        assert again["status"] == "completed"
        assert again["result"]["structuredContent"] == done["result"]["structuredContent"]


# --------------------------------------------------------------------------- questions


def test_questions_are_answered_with_tasks_update_partially_and_a_bad_answer_is_refused_and_kept(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("multi_input"))["taskId"]
    deadline = time.monotonic() + WAIT
    while True:
        got = rpc.until(task_id, "input_required")
        if len(got["inputRequests"]) == 2:
            break
        assert time.monotonic() < deadline
        time.sleep(POLL)
    first, second = got["inputRequests"]
    assert got["inputRequests"][first]["method"] == "elicitation/create"
    schema = got["inputRequests"][first]["params"]["requestedSchema"]
    assert schema["properties"]["name"]["type"] == "string"

    bad = rpc.task(
        "tasks/update", task_id, inputResponses={first: {"action": "accept", "content": {"name": 5}}}
    )
    assert bad["error"]["code"] == -32602 and first in bad["error"]["message"]
    assert set(rpc.result(rpc.task("tasks/get", task_id))["inputRequests"]) == {first, second}

    ack = rpc.task(
        "tasks/update",
        task_id,
        inputResponses={first: {"action": "accept", "content": {"name": "one"}}, "not-a-question": {"x": 1}},
    )
    assert rpc.result(ack) == {"resultType": "complete"}
    still = rpc.result(rpc.task("tasks/get", task_id))
    assert still["status"] == "input_required" and set(still["inputRequests"]) == {second}

    rpc.task(
        "tasks/update", task_id, inputResponses={second: {"action": "accept", "content": {"name": "two"}}}
    )
    done = rpc.until(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "one, two"
    # Each answer went through the interaction service, on the task channel.
    channels = server.query("SELECT channel FROM interactions WHERE id IN (:a, :b)", a=first, b=second)
    assert {c["channel"] for c in channels} == {"mcp-task"}


def test_tasks_update_is_checked_whole_so_a_good_answer_beside_a_bad_one_is_not_recorded(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("multi_input"))["taskId"]
    deadline = time.monotonic() + WAIT
    while len(got := rpc.until(task_id, "input_required")["inputRequests"]) < 2:
        assert time.monotonic() < deadline, got
        time.sleep(POLL)
    first, second = got
    try:
        refused = rpc.task(
            "tasks/update",
            task_id,
            inputResponses={
                first: {"action": "accept", "content": {"name": "good"}},
                second: {"action": "accept", "content": {"name": 5}},
            },
        )["error"]
        assert refused["code"] == -32602 and refused["message"].startswith(f"{second}: invalid answer")
        assert first not in refused["message"]
        rows = server.query("SELECT status FROM interactions WHERE id IN (:a, :b)", a=first, b=second)
        assert [r["status"] for r in rows] == ["pending", "pending"]
        assert set(rpc.result(rpc.task("tasks/get", task_id))["inputRequests"]) == {first, second}
    finally:
        rpc.task("tasks/cancel", task_id)


def test_a_task_question_answered_in_the_browser_api_resumes_the_task(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("confirm_delete", {"filename": "a.txt"}))["taskId"]
    [question] = rpc.until(task_id, "input_required")["inputRequests"]
    confirm_in_browser_api(server, key, question)
    assert rpc.until(task_id, "completed")["result"]["content"][0]["text"] == "a.txt: deleted"
    # The same answer again through the task is taken (first valid answer wins; nothing breaks).
    late = rpc.task("tasks/update", task_id, inputResponses={question: {"action": "accept", "content": {}}})
    assert rpc.result(late) == {"resultType": "complete"}


def test_an_input_round_comes_before_the_work_which_then_is_a_task(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    first = rpc.result(rpc.call("test_tool_with_task"))
    assert first["resultType"] == "input_required" and "taskId" not in first
    [question] = first["inputRequests"]
    second = rpc.result(
        rpc.call(
            "test_tool_with_task",
            inputResponses={question: {"action": "accept", "content": {"name": "Alice"}}},
            requestState=first["requestState"],
        )
    )
    assert second["resultType"] == "task" and "requestState" not in second
    assert rpc.until(second["taskId"], "completed")["result"]["content"][0]["text"] == "Hello, Alice!"


# --------------------------------------------------------------------------- cancel, errors, owners


def test_cancel_stops_the_run_and_is_acknowledged_again_once_it_ended(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 60, "label": "long"}))["taskId"]
    assert rpc.result(rpc.task("tasks/cancel", task_id)) == {"resultType": "complete"}
    ended = rpc.until(task_id, "cancelled", "completed", "failed")
    assert ended["status"] == "cancelled" and "cancelled the task" in ended["statusMessage"]
    assert rpc.result(rpc.task("tasks/cancel", task_id)) == {"resultType": "complete"}
    [run] = server.query("SELECT status FROM runs WHERE id = :r", r=_run_id(task_id))
    assert run["status"] == "cancelled"


def test_task_methods_check_headers_then_the_extension_then_the_id(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 60, "label": "ids"}))["taskId"]
    try:
        mismatch = rpc.post("tasks/get", {"taskId": task_id}, name="another-task")
        assert mismatch["error"]["code"] == -32020
        plain = Rpc(server, key, tasks=False)
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            params = {"inputResponses": {}} if method == "tasks/update" else {}
            error = plain.task(method, task_id, **params)["error"]
            assert error["code"] == -32021 and error["data"]["requiredCapabilities"]["extensions"] == {
                TASKS: {}
            }
        for method in ("tasks/result", "tasks/list"):
            assert rpc.post(method, {"taskId": task_id})["error"]["code"] == -32601
        run_id = _run_id(task_id)
        for forged in (run_id, f"{run_id}.AAAAAAAAAAAAAAAAAAAAAA", f"{task_id}x", "x" * 129, "."):
            assert rpc.task("tasks/get", forged)["error"]["code"] == -32602, forged
    finally:
        rpc.task("tasks/cancel", task_id)


def test_the_mcp_name_header_is_read_as_the_sdk_encodes_it_and_may_be_left_out(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key)
    task_id = rpc.result(rpc.call("slow_compute", {"seconds": 60, "label": "names"}))["taskId"]
    try:
        encoded = "=?base64?" + base64.b64encode(task_id.encode()).decode() + "?="
        assert rpc.result(rpc.post("tasks/get", {"taskId": task_id}, name=encoded))["status"] == "working"
        for bad in ("=?base64?not base64?=", "=?base64?" + base64.b64encode(b"other").decode() + "?="):
            assert rpc.post("tasks/get", {"taskId": task_id}, name=bad)["error"]["code"] == -32020, bad
        # No header at all (FastMCP's task client sends none): served.
        assert rpc.result(rpc.post("tasks/get", {"taskId": task_id}))["status"] == "working"
    finally:
        rpc.task("tasks/cancel", task_id)


def test_a_task_never_sends_its_poller_a_request_it_did_not_declare(server: LiveServer, key: str) -> None:
    # Sampling: refused as on a call (the handler hears why), never listed.
    rpc = Rpc(server, key)  # elicitation and tasks, no sampling
    task_id = rpc.result(rpc.call("sample_task", {"prompt": "p"}))["taskId"]
    deadline = time.monotonic() + WAIT
    while True:
        got = rpc.result(rpc.task("tasks/get", task_id))
        assert all(r["method"] != "sampling/createMessage" for r in got.get("inputRequests", {}).values()), (
            got
        )
        if got["status"] == "completed":
            break
        assert time.monotonic() < deadline, got
        time.sleep(POLL)
    assert got["result"]["structuredContent"]["output"] == {
        "refused": "the MCP client did not declare sampling"
    }
    [row] = server.query("SELECT channel, action FROM interactions WHERE run_id = :r", r=_run_id(task_id))
    assert row == {"channel": "mcp-undeclared", "action": "decline"}

    # A form, to a poller without elicitation: not listed; it waits for the browser.
    formless = Rpc(server, key, elicitation=False)
    task_id = formless.result(formless.call("confirm_delete", {"filename": "b.txt"}))["taskId"]
    deadline = time.monotonic() + WAIT
    while not (
        pending := server.query(
            "SELECT id FROM interactions WHERE run_id = :r AND status = 'pending'", r=_run_id(task_id)
        )
    ):
        assert time.monotonic() < deadline, "the question was never asked"
        time.sleep(POLL)
    waiting = formless.result(formless.task("tasks/get", task_id))
    assert waiting["status"] == "working" and "inputRequests" not in waiting
    assert "answer it in the browser" in waiting["statusMessage"]
    [question] = pending
    ignored = formless.task(
        "tasks/update",
        task_id,
        inputResponses={question["id"]: {"action": "accept", "content": {"confirm": True}}},
    )
    assert formless.result(ignored) == {"resultType": "complete"}
    assert server.query("SELECT status FROM interactions WHERE id = :i", i=question["id"]) == [
        {"status": "pending"}
    ]
    confirm_in_browser_api(server, key, question["id"])
    done = formless.until(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "b.txt: deleted" and "statusMessage" not in done


def test_another_accounts_task_reads_as_unknown_to_every_method(server: LiveServer, key: str) -> None:
    mine = Rpc(server, key)
    task_id = mine.result(mine.call("slow_compute", {"seconds": 60, "label": "mine"}))["taskId"]
    try:
        other = Rpc(server, server.create_key("mallory"))
        for method in ("tasks/get", "tasks/cancel"):
            error = other.task(method, task_id)["error"]
            assert error == {"code": -32602, "message": "Unknown task"}, error
        assert other.task("tasks/update", task_id, inputResponses={})["error"]["code"] == -32602
        assert mine.result(mine.task("tasks/get", task_id))["status"] == "working"  # untouched
        # Another key of the same account is another caller too (task ids are bound to the key).
        again = Rpc(server, server.create_key("tasker"))
        assert again.task("tasks/get", task_id)["error"]["code"] == -32602
    finally:
        mine.task("tasks/cancel", task_id)


def test_a_task_id_still_resolves_after_a_restart_and_tells_what_became_of_its_run(tmp_path: Path) -> None:
    with running_server(tmp_path) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        key = live.create_key("restarter")
        task_id = Rpc(live, key).result(Rpc(live, key).call("slow_compute", {"seconds": 60, "label": "r"}))[
            "taskId"
        ]
        live.stop()
        live.start()
        rpc = Rpc(live, key)
        got = rpc.until(task_id, "failed", "completed", "cancelled")
        # The run could not outlive its process: the task says why, under the same id.
        assert got["taskId"] == task_id and got["status"] == "failed"
        assert got["error"]["data"]["code"] in ("interrupted", "shutting_down")
