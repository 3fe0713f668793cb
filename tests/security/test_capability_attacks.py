"""Hostile uses of `"requires"` (client capabilities a tool needs), against a real server
with the conformance fixture (`test_missing_capability` requires sampling):
  - a capability declared in one 2026-07-28 request's `_meta` counts for that request only,
    and on a 2025 session a request's `_meta` cannot add one initialize did not declare;
  - unknown capability names in package.json are refused at load (registering fails);
  - a refused call creates no run, no interaction, and exactly one audit event:
    `tool.failed` with the outcome `capability_required` and the missing names (decided:
    as for every call refused before its run, an operator sees who called what; nothing
    else is written)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_capabilities_required import FIXTURE, FIXTURE_DIR, TOOL, Session, modern_call, runs_of
from tests.support import in_process_server
from webui.errors import ProjectError
from webui.workflows.project import load_project

CAPS = "io.modelcontextprotocol/clientCapabilities"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("capattacks")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("mallory")


def test_a_capability_declared_in_one_request_counts_for_that_request_only(
    server: LiveServer, key: str
) -> None:
    status, got = modern_call(server, key, {"sampling": {}})
    assert status == 200 and got["result"]["isError"] is False, got
    status, got = modern_call(server, key, {})
    assert status == 400 and got["error"]["code"] == -32021, got


def test_a_2025_session_cannot_add_a_capability_through_a_requests_meta(server: LiveServer, key: str) -> None:
    before = runs_of(server)
    session = Session(server, key, {})
    for spoof in ({CAPS: {"sampling": {}}}, {"sampling": {}}, {CAPS: {"sampling": {}, "extensions": {}}}):
        got = session.call(meta=spoof)
        assert got["result"]["isError"] is True, got
        assert got["result"]["structuredContent"]["error"]["code"] == "capability_required"
    assert runs_of(server) == before


@pytest.mark.parametrize(
    ("caps", "code"),
    [
        ({"sampling": True}, -32602),
        ({"sampling": []}, -32602),
        ({"sampling": None}, -32021),
        ({"Sampling": {}}, -32021),
    ],
)
def test_a_capability_that_is_not_an_object_is_not_declared(
    server: LiveServer, key: str, caps: dict, code: int
) -> None:
    """A malformed envelope is the SDK's -32602; a null or misspelt one is not a declaration."""
    before = runs_of(server)
    status, got = modern_call(server, key, caps)
    assert status == 400 and got["error"]["code"] == code, got
    if code == -32021:
        assert got["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}
    assert runs_of(server) == before


def test_a_refused_call_leaves_no_run_no_question_and_exactly_one_audit_event(server: LiveServer) -> None:
    key = server.create_key("auditee")
    runs, questions = runs_of(server), len(server.rows("interactions"))
    audit_before = server.query("SELECT max(id) AS n FROM audit_events")[0]["n"] or 0
    status, got = modern_call(server, key, {})
    assert status == 400 and got["error"]["code"] == -32021
    assert runs_of(server) == runs and len(server.rows("interactions")) == questions
    events = server.query(
        "SELECT event, tool, run_id, outcome, details FROM audit_events WHERE id > :n AND tool = :t",
        n=audit_before,
        t=TOOL,
    )
    assert len(events) == 1, events
    (event,) = events
    details = event["details"] if isinstance(event["details"], dict) else json.loads(event["details"])
    assert (event["event"], event["run_id"], event["outcome"]) == ("tool.failed", None, "capability_required")
    assert details == {"requires": ["sampling"]}


@pytest.mark.parametrize("names", [["tasks"], ["sampling", "__proto__"], ["sampling", "<script>"], [None]])
def test_unknown_capability_names_in_package_json_are_refused_at_load(tmp_path: Path, names: list) -> None:
    package = json.loads((FIXTURE_DIR / "package.json").read_text())
    package["entrypoints"][0]["requires"] = names
    for handler in {ep["handler"].rpartition(":")[0] for ep in package["entrypoints"]}:
        (tmp_path / handler).write_text((FIXTURE_DIR / handler).read_text())
    (tmp_path / "package.json").write_text(json.dumps(package))
    with pytest.raises(ProjectError) as info:
        load_project(tmp_path)
    assert (
        "entrypoints[0].requires" in info.value.message and "unknown client capability" in info.value.message
    )
