"""A run read back as a task (`webui.mcp.tasks._TaskState`), without a server: what a poll
says of a run waiting for questions its client cannot be sent, and of a run that ended."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from webui.mcp.tasks import _TaskState
from webui.runs.types import RunUpdate
from webui.store.models import Interaction, Run, RunEvent
from webui.store.runs import TaskView
from webui.workflows.project import Entrypoint

T0 = datetime(2026, 12, 1, tzinfo=UTC)
EP = Entrypoint(id="tool", title="Tool", description="", handler="h.py:f", timeout_seconds=None, params=())


def question(ia_id: str, kind: str, **fields: Any) -> Interaction:
    return Interaction.model_validate(
        {
            "id": ia_id,
            "run_id": "r1",
            "kind": kind,
            "title": "q",
            "requested_schema": {},
            "created_at": T0,
            **fields,
        }
    )


def state(*pending: Interaction, final: RunUpdate | None = None, progress: str | None = None) -> _TaskState:
    run = Run(id="r1", project_id="p", entrypoint_id="tool", entrypoint_title="Tool", created_at=T0)
    last = (
        RunEvent(run_id="r1", kind="progress", data={"message": progress}, created_at=T0)
        if progress
        else None
    )
    return _TaskState(
        task_id="r1.mac",
        view=TaskView(run, list(pending), last, last),
        final=final,
        ep=EP,
        local=False,
        poll_interval_ms=1000,
        answerable=lambda ia: False,  # a client that declared nothing
    )


def test_a_form_it_cannot_be_sent_waits_for_the_browser() -> None:
    task = state(question("f", "form")).task(detailed=True)
    assert task["status"] == "working" and "inputRequests" not in task
    assert "answer it in the browser" in task["statusMessage"]


def test_a_client_request_it_cannot_be_sent_is_not_sent_to_the_browser_either() -> None:
    for kind in ("sampling", "roots"):
        task = state(question("s", kind)).task(detailed=True)
        assert task["status"] == "working" and "inputRequests" not in task
        assert "browser" not in task["statusMessage"] and "MCP client" in task["statusMessage"]


def test_an_ended_task_carries_no_stale_progress_message() -> None:
    done = RunUpdate("final", "r1", "success", output="ok")
    task = state(final=done, progress="step 3 of 10").task(detailed=True)
    assert task["status"] == "completed" and "statusMessage" not in task
    failed = RunUpdate("final", "r1", "failed", error={"code": "worker_crashed", "message": "It died."})
    task = state(final=failed, progress="step 3 of 10").task(detailed=True)
    assert (task["status"], task["statusMessage"], task["error"]["message"]) == (
        "failed",
        "It died.",
        "It died.",
    )


def test_an_ended_task_links_the_files_its_run_created_over_http_only() -> None:
    """A task's result, as a tools/call result: over HTTP each created file is also a
    `resource_link` to its download; over stdio (no address) the result names them only."""
    view = {"id": "wf_0123456789abcdef", "name": "a b.txt", "mimeType": "text/plain", "size": 3, "path": "/x"}
    done = RunUpdate("final", "r1", "success", output="ok", files=[view])
    http = state(final=done)
    http.download_base = "https://mcp.example/"
    content = http.task(detailed=True)["result"]["content"]
    assert [c["type"] for c in content] == ["text", "resource_link"]
    assert content[1] == {
        "type": "resource_link",
        "uri": "https://mcp.example/api/runs/r1/files/wf_0123456789abcdef",
        "name": "a b.txt",
        "mimeType": "text/plain",
        "size": 3,
        "description": "A file the run created: GET it with the same Authorization header.",
    }
    assert [c["type"] for c in state(final=done).task(detailed=True)["result"]["content"]] == ["text"]
