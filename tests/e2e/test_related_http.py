"""Related projects on the server: publishing checks both sides of every relation; over
HTTP a handler runs a related project's entrypoint as a child run (at the same kind of
target), its question answered by the same client, and every refusal is a clear error."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from tests import processes
from tests.e2e.server import LiveServer, free_port
from tests.e2e.test_http_mcp import _wait_run, payload, sdk_client
from tests.helpers import WAIT
from tests.related_projects import GHOST, HELPER, MAIN, STRANGER, write_projects

STEAMHARNESS = processes.STEAMHARNESS


def cli(data: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = processes.run(
        [STEAMHARNESS, *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error:"), proc.stderr
    return lines[0]


def test_publishing_checks_that_every_related_project_names_this_one_back(tmp_path: Path) -> None:
    data = tmp_path / "data"
    f = write_projects(tmp_path / "p")
    for name in ("main", "helper", "stranger"):
        cli(data, "projects", "add", str(f[name]))
    line = refused(cli(data, "projects", "publish", MAIN, check=False))
    assert f"{f['main']}/package.json: relatedProjects:" in line
    assert f"'stranger' ({STRANGER}) does not name project {MAIN} back" in line

    f = write_projects(
        tmp_path / "p", main_related=[{"alias": "helper", "id": HELPER}, {"alias": "ghost", "id": GHOST}]
    )
    line = refused(cli(data, "projects", "publish", MAIN, check=False))
    assert f"'ghost' ({GHOST}) is not a project registered on this server; register it first" in line

    write_projects(tmp_path / "p", main_related=[{"alias": "helper", "id": HELPER}])
    assert cli(data, "projects", "publish", MAIN).stdout.strip() == "1.0.0"
    assert cli(data, "projects", "publish", HELPER).stdout.strip() == "1.0.0"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """main and helper published (1.0.0) naming each other; main's draft then also names
    the one-sided stranger and the unregistered ghost."""
    base = tmp_path_factory.mktemp("related")
    admin_key = secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    live = LiveServer(
        data_dir=base / "data",
        projects=base / "p",
        port=free_port(),
        admin_key=admin_key,
        env={**env, "STEAMHARNESS_SERVER_ADMIN_KEY": admin_key},
    )
    f = write_projects(live.projects, main_related=[{"alias": "helper", "id": HELPER}])
    for name in ("main", "helper", "stranger"):
        live.register(f[name])
    for pid in (MAIN, HELPER, STRANGER):
        live.publish(pid)
    write_projects(live.projects)
    with live.running():
        yield live


def greeting(seen: list[str]) -> Any:
    async def callback(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message.splitlines()[0])
        return types.ElicitResult(action="accept", content={"greeting": "Hola"})

    return callback


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "target"), [("legacy", "latest"), ("auto", "draft")])
async def test_a_child_run_over_http_asks_the_same_client_and_is_linked_to_its_parent(
    server: LiveServer, mode: str, target: str
) -> None:
    key = server.create_key("rita")
    seen: list[str] = []
    async with sdk_client(server.mcp_url(MAIN, target), key, mode, greeting(seen)) as client:
        body = payload(await client.call_tool("delegate", {"name": "Bo"}))
    assert body["status"] == "success", body
    out = body["output"]
    assert out["helperId"] == HELPER and out["child"]["text"] == "Hola, Bo" and out["kv"] == "Bo"
    assert out["child"]["salutation"] == "Dear"  # the helper's configuration in rita's scope: defaults
    assert seen == ["Confirm the greeting"]
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {server.admin_key}"}
    ) as http:
        parent = (await http.get(f"/api/runs/{body['runId']}")).json()["data"]
        child = (await http.get(f"/api/runs/{out['child']['run']}")).json()["data"]
    assert parent["parentRunId"] is None and child["parentRunId"] == parent["runId"]
    assert child["projectId"] == HELPER and child["entrypointId"] == "greet" and child["status"] == "success"
    assert child["configuration"]["name"] == "default"
    if target == "latest":
        assert (parent["version"], child["version"]) == ("1.0.0", "1.0.0")
    else:  # draft with draft: the helper's draft revision
        assert parent["version"].startswith("rev-") and child["version"].startswith("rev-")
    assert [e["data"]["runId"] for e in parent["events"] if e["kind"] == "child"] == [child["runId"]] * 2
    assert [e["data"]["runId"] for e in child["events"] if e["kind"] == "parent"] == [parent["runId"]]
    assert [e["text"] for e in parent["events"] if e["kind"] == "state"] == [
        "queued",
        "running",
        "waiting_for_child",
        "running",
        "success",
    ]


async def probe(server: LiveServer, key: str, case: str, target: str = "draft") -> dict[str, Any]:
    async with sdk_client(server.mcp_url(MAIN, target), key, "legacy") as client:
        body = payload(await client.call_tool("probe", {"case": case}))
    assert body["status"] == "success", body
    return body["output"]


@pytest.mark.anyio
async def test_every_refusal_over_http_is_a_clear_exception_in_the_handler(server: LiveServer) -> None:
    key = server.create_key("sam")
    got = {
        c: await probe(server, key, c)
        for c in ("alias", "entrypoint", "params", "fails", "stranger", "ghost")
    }
    assert got["alias"]["error"] == "UnknownRelatedProject"
    assert "related project 'nope' is not declared" in got["alias"]["message"]
    assert got["entrypoint"]["message"] == (
        f"related project 'helper' ({HELPER}) has no entrypoint 'missing' (it has: 'greet', 'fail', 'bounce')"
    )
    assert got["params"]["message"].startswith("related project 'helper': Invalid arguments for tool 'greet'")
    assert got["fails"]["error"] == "RelatedRunFailed"
    assert "business_error: the helper refuses (errCode 7)" in got["fails"]["message"]
    # one-sided: the stranger is registered but does not name main back
    assert got["stranger"] == {
        "error": "RelatedProjectError",
        "message": f"related project 'stranger' ({STRANGER}) does not name project {MAIN} back in its"
        " relatedProjects: a relation must be confirmed by both projects",
    }
    # missing: an account is never granted an unregistered project; the admin key is told why
    assert got["ghost"]["message"] == (
        f"related project 'ghost' ({GHOST}): this API key (or its account) has no run permission"
        " on this project"
    )
    assert (await probe(server, server.admin_key, "ghost")) == {
        "error": "RelatedProjectError",
        "message": f"related project 'ghost' ({GHOST}) is not registered on this server",
    }


@pytest.mark.anyio
async def test_the_caller_needs_run_permission_on_the_related_project_too(server: LiveServer) -> None:
    only_main = server.create_key("tess", projects=[MAIN])
    both = server.create_key("tess", projects=[MAIN, HELPER])
    refused = await probe(server, only_main, "kv", target="latest")
    assert refused == {
        "error": "RelatedProjectError",
        "message": f"related project 'helper' ({HELPER}): this API key (or its account) has no run"
        " permission on this project",
    }
    assert (await probe(server, both, "kv", target="latest"))["error"] is None
    async with sdk_client(server.mcp_url(MAIN), only_main, "legacy", greeting([])) as client:
        body = payload(await client.call_tool("delegate", {"name": "X"}))
    assert body["status"] == "failed" and body["error"]["code"] == "handler_error"


@pytest.mark.anyio
async def test_an_offline_related_project_is_refused_at_the_latest_target(server: LiveServer) -> None:
    key = server.create_key("uma")
    server.set_online(HELPER, "1.0.0", False)
    try:
        refused = await probe(server, key, "kv", target="latest")
    finally:
        server.set_online(HELPER, "1.0.0", True)
    assert refused["error"] == "RelatedProjectError"
    assert refused["message"].startswith(
        f"related project 'helper' ({HELPER}): project {HELPER} has no online"
    )
    assert (await probe(server, key, "kv", target="latest"))["error"] is None


@pytest.mark.anyio
async def test_a_closed_run_gate_of_the_related_project_refuses_the_child_run(server: LiveServer) -> None:
    key = server.create_key("vera")
    server.set_limits(HELPER, run_gate_open=False)
    try:
        async with sdk_client(server.mcp_url(MAIN), key, "legacy", greeting([])) as client:
            body = payload(await client.call_tool("probe", {"case": "fails"}))
    finally:
        server.set_limits(HELPER, run_gate_open=True)
    assert body["output"] == {
        "error": "RelatedProjectError",
        "message": "related project 'helper': The project's run gate is closed; no new runs are accepted.",
    }


@pytest.mark.anyio
async def test_without_elicitation_the_childs_question_is_answered_through_the_api(
    server: LiveServer,
) -> None:
    key = server.create_key("wes")
    async with sdk_client(server.mcp_url(MAIN), key, "legacy") as client:
        result = await client.call_tool("delegate", {"name": "Cy"})
    body = payload(result)
    assert result.is_error is True and body["error"]["code"] == "interaction_required"
    parent_id = body["runId"]
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        with anyio.fail_after(60):
            run = (await http.get(f"/api/runs/{parent_id}")).json()["data"]
            assert run["status"] == "waiting_for_child"
            question = run["interaction"]
            assert question["interactionId"] == body["error"]["interactionId"]
            assert question["title"] == "Confirm the greeting" and question["runId"] != parent_id
            r = await http.post(
                f"/api/interactions/{question['interactionId']}/answer",
                json={"action": "accept", "content": {"greeting": "Yo"}},
            )
            assert r.status_code == 200, r.text
            run = await _wait_run(http, parent_id)
    assert run["status"] == "success" and run["output"]["child"]["text"] == "Yo, Cy"
