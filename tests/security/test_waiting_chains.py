"""One account cannot fill the server's cap on waiting runs with chains of child runs.

Each level of a chain (a parent waiting for its child) is a waiting run, but only the
question at its end counted against the account's own cap: two chains three deep held
six waiting runs, the server's whole cap here, with two open questions, within the
account's cap of two, and every other account's question was refused. Now an account
with as many waiting runs as its cap, for any reason, starts no further child run.
A real `steamharness serve`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.e2e.server import LiveServer, make_server
from tests.security.test_slots import BOUND, call, cancel_questions

pytestmark = pytest.mark.anyio

TOP = "8e2a4c6b-1d3f-4a5e-9b7c-2d4e6f8a0b11"
MID = "8e2a4c6b-1d3f-4a5e-9b7c-2d4e6f8a0b12"
PER_ACCOUNT = 2
IN_ALL = 6

TOP_PY = """
def top(ctx):
    try:
        return ctx.related["mid"].run("mid")
    except Exception as exc:
        return {"refused": str(exc)}


def leaf(ctx):
    return ctx.ask("Hold on", [{"name": "word", "type": "string", "required": True}])
"""

MID_PY = """
def mid(ctx):
    return ctx.related["top"].run("leaf")
"""


def write_projects(base: Path) -> list[Path]:
    top = {
        "id": TOP,
        "name": "chain-top",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": [{"alias": "mid", "id": MID}],
        "entrypoints": [
            {"id": "top", "handler": "top.py:top", "timeoutSeconds": BOUND},
            {"id": "leaf", "handler": "top.py:leaf", "timeoutSeconds": BOUND},
        ],
    }
    mid = {
        "id": MID,
        "name": "chain-mid",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": [{"alias": "top", "id": TOP}],
        "entrypoints": [{"id": "mid", "handler": "mid.py:mid", "timeoutSeconds": BOUND}],
    }
    folders = []
    for name, doc, code in (("top", top, TOP_PY), ("mid", mid, MID_PY)):
        folder = base / name
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        (folder / f"{name}.py").write_text(code, encoding="utf-8")
        folders.append(folder)
    return folders


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = make_server(
        tmp_path_factory.mktemp("chains"),
        STEAMHARNESS_MAX_CONCURRENT_RUNS="2",
        STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT=str(PER_ACCOUNT),
        STEAMHARNESS_MAX_WAITING_RUNS=str(IN_ALL),
    )
    for folder in write_projects(live.projects / "chain-projects"):
        live.register(folder)
    for project_id in (MID, TOP):
        live.publish(project_id)
    with live.running():
        yield live


async def test_one_accounts_chains_of_child_runs_leave_room_for_another_accounts_question(
    server: LiveServer,
) -> None:
    attacker = server.create_key("mallory")
    victim = server.create_key("victor")
    results = []
    try:
        with anyio.fail_after(BOUND):
            for _ in range(2):  # each chain: top waits for mid, mid for leaf, leaf asks
                results.append(await call(server, attacker, "top", {}, project=TOP))
            mine = await call(server, victim, "leaf", {}, project=TOP)
        assert results[0]["error"]["code"] == "interaction_required", results[0]
        # The second chain stops where the account's cap is reached, not the server's.
        assert results[1]["status"] == "success", results[1]
        assert "STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT" in results[1]["output"]["refused"], results[1]
        assert mine["error"]["code"] == "interaction_required", mine
    finally:
        pending = server.query(
            "select i.id, r.account_id from interactions i join runs r on r.id = i.run_id"
            " where i.status = 'pending'"
        )
        keys = {}
        for row in server.query("select id, name from accounts"):
            keys[row["id"]] = {"mallory": attacker, "victor": victim}.get(row["name"])
        with anyio.fail_after(BOUND):
            await cancel_questions(
                server, [(r["id"], keys[r["account_id"]]) for r in pending if keys.get(r["account_id"])]
            )
