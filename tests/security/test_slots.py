"""Worker slots against a real `steamharness serve` with two slots: parents whose handler
threads start many child runs at once never hold the slots their children need; runs left
waiting for a person hold none either (capped apart, per account and in all); a freed slot
goes to the account holding the fewest; and the project's default queue limit refuses the
excess of a burst even when no running limit is set, losing none of what it accepted."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import HELLO, LiveServer, make_server
from tests.e2e.test_http_mcp import payload

# Slots and queue limits are counted in the database under a lock on PostgreSQL: both
# dialects (tests/pg.py).
pytestmark = [pytest.mark.anyio, pytest.mark.dialects]

SLOTS = "6d1f0c2a-3b4e-4c5d-8e9f-0a1b2c3d4e51"
KID = "6d1f0c2a-3b4e-4c5d-8e9f-0a1b2c3d4e52"
MAX_RUNNING = 2
WAITING_PER_ACCOUNT = 3
WAITING_IN_ALL = 5
QUEUED = 3
THREADS = 10
# Each thread starts its children one after the other: the first wave of 30 (3 parents x 10
# threads against 2 slots) is what would deadlock, the later ones that a finished child's
# slot comes back; a few per thread show both (every child run costs a worker).
CHILDREN_PER_THREAD = 3
PARENTS = MAX_RUNNING + 1
# Far below the stall this attacks (the 3600 s default time limit), far above a fair wait.
PROMPT = 60
BOUND = 300

SLOTS_PY = '''
import os
import threading
import time


def hold(ctx):
    """Runs (holding its slot) until the test creates the file `gate` names."""
    while not os.path.exists(ctx.params["gate"]):
        time.sleep(0.02)
    return {"held": True}


def ask(ctx):
    answer = ctx.ask("Wait for me", [{"name": "word", "type": "string", "required": True}])
    return {"word": answer["word"]}


def fan(ctx):
    """Many threads, each starting child runs one after the other."""
    done, errors = [], []

    def one(t):
        try:
            for i in range(ctx.params["children"]):
                done.append(ctx.related["kid"].run("echo", n=t * 1000 + i)["n"])
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(t,)) for t in range(ctx.params["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"children": sorted(done), "errors": errors}
'''

KID_PY = """
def echo(ctx):
    return {"n": ctx.params["n"]}
"""


def write_projects(base: Path) -> dict[str, Path]:
    number = {"type": "number", "required": True}
    slots = {
        "id": SLOTS,
        "name": "slots",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": [{"alias": "kid", "id": KID}],
        "entrypoints": [
            {
                "id": "hold",
                "handler": "slots.py:hold",
                "timeoutSeconds": BOUND,
                "params": [{"name": "gate", "type": "string", "required": True}],
            },
            {"id": "ask", "handler": "slots.py:ask", "timeoutSeconds": BOUND, "params": []},
            {
                "id": "fan",
                "handler": "slots.py:fan",
                "timeoutSeconds": BOUND,
                "params": [{"name": "threads", **number}, {"name": "children", **number}],
            },
        ],
    }
    kid = {
        "id": KID,
        "name": "slots-kid",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": [{"alias": "parent", "id": SLOTS}],
        "entrypoints": [{"id": "echo", "handler": "kid.py:echo", "params": [{"name": "n", **number}]}],
    }
    folders = {}
    for name, doc, code in (("slots", slots, SLOTS_PY), ("kid", kid, KID_PY)):
        folder = base / name
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        (folder / f"{name}.py").write_text(code, encoding="utf-8")
        folders[name] = folder
    return folders


@pytest.fixture(scope="module")
def gates_root() -> Iterator[Path]:
    """Where each test's gates are: a folder the worker users read (a read path of the
    server's, so it is in every run's filesystem view)."""
    folder = Path(tempfile.mkdtemp(prefix="sh-gates-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None, gates_root: Path
) -> Iterator[LiveServer]:
    live = make_server(
        tmp_path_factory.mktemp("slots"),
        server_database_url,
        STEAMHARNESS_WORKER_READ_PATHS=json.dumps([str(gates_root)]),
        STEAMHARNESS_MAX_CONCURRENT_RUNS=str(MAX_RUNNING),
        STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT=str(WAITING_PER_ACCOUNT),
        STEAMHARNESS_MAX_WAITING_RUNS=str(WAITING_IN_ALL),
        STEAMHARNESS_MAX_QUEUED_PER_PROJECT=str(QUEUED),
    )
    folders = write_projects(live.projects / "slots-projects")
    for folder in folders.values():
        live.register(folder)
    for project_id in (KID, SLOTS):
        live.publish(project_id)
    # Every child run of the fan-out may queue at once; the parents' project keeps the default.
    live.set_limits(KID, max_queued=PARENTS * THREADS)
    with live.running():
        yield live


@pytest.fixture
def gates(gates_root: Path) -> Iterator[Path]:
    """A folder the worker user can read, for the files that let `hold` runs finish."""
    folder = Path(tempfile.mkdtemp(prefix="test-", dir=gates_root))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------- helpers


@asynccontextmanager
async def sdk_client(url: str, key: str) -> AsyncIterator[Client]:
    """The MCP SDK client, without form elicitation, its whole session bounded by BOUND
    (a loaded machine makes a burst of calls slow, never endless)."""
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=BOUND)
    ) as http:
        with anyio.fail_after(BOUND):
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                yield client


async def call(server: LiveServer, key: str, tool: str, args: dict[str, Any], project: str = SLOTS) -> Any:
    """One tool call from a client without form elicitation (a question comes back as
    `interaction_required` at once and the run keeps waiting)."""
    async with sdk_client(server.mcp_url(project), key) as client:
        return payload(await client.call_tool(tool, args))


async def run_status(server: LiveServer, run_id: str) -> str:
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {server.admin_key}"}, timeout=30
    ) as http:
        return (await http.get(f"/api/runs/{run_id}")).json()["data"]["status"]


async def until_status(server: LiveServer, run_id: str, wanted: str) -> None:
    while (status := await run_status(server, run_id)) != wanted:
        assert status not in ("success", "failed", "cancelled", "timeout"), (run_id, status)
        await anyio.sleep(0.05)  # polling the run, bounded by the caller's fail_after


def runs_of(server: LiveServer, project: str) -> list[dict[str, Any]]:
    return server.query("select id, status, error from runs where project_id = :p", p=project)


async def cancel_questions(server: LiveServer, questions: list[tuple[str, str]]) -> None:
    """Cancel (interaction id, owner key) questions: their runs end, their workers go."""
    async with httpx2.AsyncClient(base_url=server.base_url, timeout=30) as http:
        for interaction_id, key in questions:
            r = await http.post(
                f"/api/interactions/{interaction_id}/answer",
                json={"action": "cancel"},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert r.status_code == 200, r.text


async def open_question(server: LiveServer, key: str) -> tuple[str, str]:
    body = await call(server, key, "ask", {})
    assert body["error"]["code"] == "interaction_required", body
    return body["error"]["interactionId"], body["runId"]


# --------------------------------------------------------------------------- tests


async def test_parents_whose_threads_start_many_child_runs_never_hold_the_slots_their_children_need(
    server: LiveServer,
) -> None:
    key = server.create_key("fanner")
    bystander = server.create_key("bystander")
    results: list[dict[str, Any]] = []
    args = {"threads": THREADS, "children": CHILDREN_PER_THREAD}

    async def parent() -> None:
        results.append(await call(server, key, "fan", args))

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            for _ in range(PARENTS):
                tg.start_soon(parent)
            while not runs_of(server, KID):
                await anyio.sleep(0.05)  # until the parents started their children
            # Another account's plain call meanwhile is served without waiting for them.
            with anyio.fail_after(PROMPT):
                plain = await call(server, bystander, "greet", {"name": "Bo"}, project=HELLO)
            assert plain["status"] == "success", plain
    want = sorted(t * 1000 + i for t in range(THREADS) for i in range(CHILDREN_PER_THREAD))
    for body in results:
        assert body["status"] == "success", body
        assert body["output"] == {"children": want, "errors": []}
    children = runs_of(server, KID)
    assert len(children) == PARENTS * THREADS * CHILDREN_PER_THREAD
    assert {c["status"] for c in children} == {"success"}


async def test_unanswered_questions_hold_no_slot_and_are_capped_per_account_and_in_all(
    server: LiveServer,
) -> None:
    asker = server.create_key("asker")
    other = server.create_key("other")
    third = server.create_key("third")
    fourth = server.create_key("fourth")
    questions: list[tuple[str, str]] = []
    try:
        with anyio.fail_after(BOUND):
            for _ in range(WAITING_PER_ACCOUNT):  # more than the two slots
                interaction_id, _ = await open_question(server, asker)
                questions.append((interaction_id, asker))
        with anyio.fail_after(PROMPT):
            plain = await call(server, other, "greet", {"name": "Cy"}, project=HELLO)
        assert plain["status"] == "success", plain

        with anyio.fail_after(BOUND):
            over = await call(server, asker, "ask", {})
        assert over["status"] == "failed" and over["error"]["code"] == "too_many_waiting", over
        assert "STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT" in over["error"]["message"]
        assert "answer or cancel one of them" in over["error"]["message"]
        stored = server.query("select status, error from runs where id = :r", r=over["runId"])
        assert stored[0]["status"] == "failed"
        assert server.query("select id from interactions where run_id = :r", r=over["runId"]) == []

        # Another account still waits, but the server's last place (a quarter of its cap) is
        # kept for an account with none waiting; then the server's cap holds for everyone.
        with anyio.fail_after(BOUND):
            interaction_id, _ = await open_question(server, other)
            questions.append((interaction_id, other))
            kept = await call(server, other, "ask", {})
            assert kept["status"] == "failed" and kept["error"]["code"] == "too_many_waiting", kept
            assert "kept for accounts with none waiting" in kept["error"]["message"]
            interaction_id, _ = await open_question(server, third)
            questions.append((interaction_id, third))
            full = await call(server, fourth, "ask", {})
        assert full["status"] == "failed" and full["error"]["code"] == "too_many_waiting", full
        assert "STEAMHARNESS_MAX_WAITING_RUNS)" in full["error"]["message"]
        # Running is not waiting: a plain call still gets a slot.
        with anyio.fail_after(PROMPT):
            plain = await call(server, fourth, "greet", {"name": "Di"}, project=HELLO)
        assert plain["status"] == "success", plain
    finally:
        with anyio.fail_after(BOUND):
            await cancel_questions(server, questions)

    # An answered question's run goes on as soon as it has a slot again.
    with anyio.fail_after(BOUND):
        interaction_id, run_id = await open_question(server, asker)
        async with httpx2.AsyncClient(base_url=server.base_url, timeout=30) as http:
            r = await http.post(
                f"/api/interactions/{interaction_id}/answer",
                json={"action": "accept", "content": {"word": "go"}},
                headers={"Authorization": f"Bearer {asker}"},
            )
            assert r.status_code == 200, r.text
        await until_status(server, run_id, "success")


async def test_a_freed_slot_goes_to_the_account_holding_fewest_before_older_queued_runs(
    server: LiveServer, gates: Path
) -> None:
    busy = server.create_key("busy")
    fair = server.create_key("fair")
    started: dict[str, str] = {}

    async def hold(name: str, key: str) -> None:
        body = await call(server, key, "hold", {"gate": str(gates / name)})
        assert body["status"] == "success", body
        started[name] = body["runId"]

    def run_of(name: str) -> str:
        return next(r["id"] for r in server.query("select id, params from runs") if name in str(r["params"]))

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            for i in range(4):  # two take the slots, two queue
                tg.start_soon(hold, f"busy{i}", busy)
                while (
                    len(
                        server.query(
                            "select id from runs where project_id = :p and status in ('running', 'queued')",
                            p=SLOTS,
                        )
                    )
                    <= i
                ):
                    await anyio.sleep(0.05)  # in this order
            await until_status(server, run_of("busy1"), "running")
            tg.start_soon(hold, "fair0", fair)
            while (
                len(server.query("select id from runs where project_id = :p and status = 'queued'", p=SLOTS))
                < 3
            ):
                await anyio.sleep(0.05)
            (gates / "busy0").touch()  # one slot frees: it goes to the account holding none
            await until_status(server, run_of("fair0"), "running")
            assert await run_status(server, run_of("busy2")) == "queued"
            assert await run_status(server, run_of("busy3")) == "queued"
            for name in ("busy1", "busy2", "busy3", "fair0"):
                (gates / name).touch()
    assert len(started) == 5


async def test_the_default_queue_limit_refuses_a_bursts_excess_with_no_running_limit_set(
    server: LiveServer, gates: Path
) -> None:
    key = server.create_key("burst")
    before = {r["id"] for r in runs_of(server, SLOTS)}
    gate = str(gates / "burst")
    bodies: list[dict[str, Any]] = []
    burst = MAX_RUNNING + QUEUED + 7

    async def one() -> None:  # each call on a session of its own, all at once
        bodies.append(await call(server, key, "hold", {"gate": gate}))

    def settled() -> tuple[int, int]:
        """(calls refused, runs created) so far: every call of the burst ends as one of them."""
        created = sum(1 for r in runs_of(server, SLOTS) if r["id"] not in before)
        return sum(1 for b in bodies if b["status"] == "failed"), created

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            for _ in range(burst):
                tg.start_soon(one)
            # The refusals come back at once, the accepted calls hold until the gate opens:
            # wait until each call is one or the other (a call neither refused nor run after
            # the bound fails here with the numbers, not with a hang).
            try:
                with anyio.move_on_after(PROMPT):
                    while sum(settled()) < burst:
                        await anyio.sleep(0.05)
                assert settled() == (burst - MAX_RUNNING - QUEUED, MAX_RUNNING + QUEUED), (
                    settled(),
                    runs_of(server, SLOTS),
                )
            finally:
                Path(gate).touch()  # the accepted runs end even when the numbers are wrong
    refused = [b for b in bodies if b["status"] == "failed"]
    accepted = [b for b in bodies if b["status"] == "success"]
    assert len(accepted) == MAX_RUNNING + QUEUED and len(refused) == burst - MAX_RUNNING - QUEUED
    assert {b["error"]["code"] for b in refused} == {"queue_limit"}
    assert all(b.get("runId") is None for b in refused)
    # Nothing lost: every accepted call is one run, finished; no refused call left a run.
    created = [r for r in runs_of(server, SLOTS) if r["id"] not in before]
    assert sorted(r["id"] for r in created) == sorted(b["runId"] for b in accepted)
    assert {r["status"] for r in created} == {"success"}
