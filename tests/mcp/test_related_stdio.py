"""Related projects over stdio: what `steamharness mcp DIR --related-project a=/dir` serves,
driven by the Python SDK client in memory (tests/support/memory.py). Relations are checked
at start (the real process); a handler runs a related project's entrypoint as a child run
whose question reaches the same client."""

from __future__ import annotations

import subprocess
from pathlib import Path

import mcp_types as types
import pytest

from tests import processes
from tests.cli_runner import run_cli
from tests.helpers import WAIT
from tests.mcp.test_stdio_protocol import MODES, STEAMHARNESS, in_memory, payload, scripted
from tests.related_projects import HELPER, MAIN, STRANGER, write_projects
from webui.store import runs as run_store
from webui.store.db import make_engine

pytestmark = pytest.mark.anyio


def start_failure(tmp_path: Path, *args: str) -> str:
    proc = processes.run(
        [STEAMHARNESS, "mcp", *args, "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error:"), proc.stderr
    return lines[0]


def test_a_one_sided_relation_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"stranger={f['stranger']}")
    assert f"--related-project stranger: related project 'stranger' ({STRANGER}) does not name" in line
    assert f"project {MAIN} back" in line
    # and from the other side: the stranger declares nothing at all
    line = start_failure(tmp_path, str(f["stranger"]), "--related-project", f"main={f['main']}")
    assert "--related-project main: related project 'main' is not declared" in line


def test_an_alias_the_project_does_not_declare_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"nope={f['helper']}")
    assert "--related-project nope: related project 'nope' is not declared in relatedProjects" in line
    assert "(declared: 'helper', 'stranger', 'ghost')" in line


def test_a_folder_holding_another_project_than_declared_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"helper={f['stranger']}")
    assert f"is project {STRANGER}, but relatedProjects of project {MAIN} names {HELPER}" in line


def test_a_folder_that_is_no_project_refuses_to_start(tmp_path: Path) -> None:
    f = write_projects(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    line = start_failure(tmp_path, str(f["main"]), "--related-project", f"helper={empty}")
    assert f"--related-project helper: {empty}: no package.json" in line


def related(f: dict[str, Path]) -> dict[str, str]:
    """`--related-project helper=DIR`."""
    return {"helper": str(f["helper"])}


@pytest.mark.parametrize("mode", MODES)
async def test_a_child_run_asks_its_question_through_the_parents_call(
    tmp_path: Path, mode: str, database_url: str
) -> None:
    f = write_projects(tmp_path / "p")
    seen: list[types.ElicitRequestParams] = []
    answer = types.ElicitResult(action="accept", content={"greeting": "Hej"})
    data = tmp_path / "data"
    # the child run starts with the helper's own (local) configuration
    # (set up in this process: tests/configs runs the configs command as a real process)
    configs = ["configs", "set", str(f["helper"]), "default", "salutation=Hi", "--revision", "1"]
    store = ("--database-url", database_url)
    done = run_cli([*configs, "--data-dir", str(data), *store])
    assert done.returncode == 0, done.stderr
    async with in_memory(
        f["main"],
        data,
        mode,
        database_url=database_url,
        related=related(f),
        elicit=scripted(answer, seen=seen),
    ) as client:
        result = await client.call_tool("delegate", {"name": "Ann"})
    body = payload(result)
    assert body["status"] == "success", body
    out = body["output"]
    assert out["helperId"] == HELPER
    assert out["before"] == "nobody"
    assert out["child"]["text"] == "Hej, Ann" and out["child"]["salutation"] == "Hi"
    assert out["kv"] == "Ann" and out["value"] == 1
    assert out["aliases"] == ["ghost", "helper", "stranger"]
    assert [p.message.splitlines()[0] for p in seen] == ["Confirm the greeting"]

    # Persisted, isolated and linked both ways in the timelines.
    engine = make_engine(database_url)
    parent = run_store.get_run(engine, run_id=body["runId"])
    child = run_store.get_run(engine, run_id=out["child"]["run"])
    assert parent is not None and child is not None
    assert parent.parent_run_id is None and child.parent_run_id == parent.id
    assert (child.project_id, child.entrypoint_id, child.status) == (HELPER, "greet", "success")
    assert child.params == {"name": "Ann"} and child.output == out["child"]
    assert child.actor == parent.actor and child.account_id == parent.account_id
    parent_events = run_store.list_events(engine, run_id=parent.id)
    child_events = run_store.list_events(engine, run_id=child.id)
    links = [e.data for e in parent_events if e.kind == "child"]
    assert links[0] == {"runId": child.id, "projectId": HELPER, "entrypointId": "greet", "alias": "helper"}
    assert links[1] == {"runId": child.id, "status": "success"}
    assert [e.data for e in child_events if e.kind == "parent"] == [
        {"runId": parent.id, "projectId": MAIN, "entrypointId": "delegate"}
    ]
    states = [e.text for e in parent_events if e.kind == "state"]
    assert states == ["queued", "running", "waiting_for_child", "running", "success"]
    assert "waiting_for_input" in [e.text for e in child_events if e.kind == "state"]
    engine.dispose()


async def test_every_refusal_reaches_the_handler_as_a_clear_exception(tmp_path: Path) -> None:
    f = write_projects(tmp_path / "p")
    async with in_memory(
        f["main"], tmp_path / "data", "legacy", related=related(f), elicit=scripted()
    ) as client:
        got = {
            case: payload(await client.call_tool("probe", {"case": case}))["output"]
            for case in ("alias", "entrypoint", "params", "fails", "stranger", "write", "kv")
        }
    assert got["alias"]["error"] == "UnknownRelatedProject"
    assert got["alias"]["message"] == (
        "related project 'nope' is not declared in this project's relatedProjects"
        " (declared: 'helper', 'stranger', 'ghost')"
    )
    assert got["entrypoint"] == {
        "error": "RelatedProjectError",
        "message": f"related project 'helper' ({HELPER}) has no entrypoint 'missing'"
        " (it has: 'greet', 'fail', 'bounce')",
    }
    assert got["params"]["error"] == "RelatedProjectError"
    assert got["params"]["message"].startswith("related project 'helper': Invalid arguments for tool 'greet'")
    assert "name" in got["params"]["message"]
    assert got["fails"]["error"] == "RelatedRunFailed"
    assert "ended failed: business_error: the helper refuses (errCode 7)" in got["fails"]["message"]
    # not given on the command line (it could not have been: it does not name main back)
    assert got["stranger"] == {
        "error": "RelatedProjectError",
        "message": f"related project 'stranger' ({STRANGER}) was not given: start `steamharness mcp`"
        " with --related-project stranger=/absolute/folder/of/it",
    }
    assert got["write"] == {
        "error": "RelatedProjectError",
        "message": "related project 'helper': its kv are read-only here",
    }
    assert got["kv"] == {"error": None, "kv": "unset"}


async def test_a_relation_loop_stops_at_the_depth_limit(tmp_path: Path) -> None:
    f = write_projects(tmp_path / "p")
    async with in_memory(f["main"], tmp_path / "data", "legacy", related=related(f)) as client:
        body = payload(await client.call_tool("bounce", {}))
    assert body["status"] == "success", body
    chain = body["output"]
    hops = []
    while "next" in chain:
        hops.append(chain)
        chain = chain["next"]
    assert len(hops) == 3  # main → helper → main → helper (depth 3) refused to go on
    assert "already a child run 3 levels deep, the limit (3)" in chain["stopped"]
