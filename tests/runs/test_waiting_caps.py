"""The caps of waiting runs with real worker processes: a few accounts asking up to their own
cap cannot take every place for waiting runs, so another account's question is still taken
(the last quarter of the places is kept for accounts with none waiting, one each); past the
server's cap every asker is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests import prepared
from tests.conftest import TORTURE
from tests.helpers import RUN_WAIT_SECONDS
from webui.runs.admission import reserved_waiting
from webui.runs.request import RunRequest
from webui.runs.types import RunUpdate
from webui.services import Services, open_services
from webui.settings import Settings
from webui.workflows.project import Project, load_project

pytestmark = pytest.mark.anyio

# The issue's shape at a quarter of its size: the server's cap is exactly 4 accounts' caps.
IN_ALL = 8
PER_ACCOUNT = 2
FILLERS = IN_ALL // PER_ACCOUNT


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[Services]:
    prepared.copy_prepared("store", tmp_path / "data")
    settings = Settings(
        data_dir=tmp_path / "data",
        max_waiting_runs=IN_ALL,
        max_waiting_runs_per_account=PER_ACCOUNT,
        kill_grace_seconds=0.2,
    )
    async with open_services(settings) as services:
        yield services


async def ask(svc: Services, project: Project, account_id: int) -> RunUpdate:
    """One run of `account_id` asking a question: its `waiting` update once the question is
    taken, or its final one when it was refused."""
    entrypoint = project.entrypoint("ask_once")
    assert entrypoint is not None
    request = RunRequest(
        project=project, entrypoint=entrypoint, params={}, stored_params={}, account_id=account_id
    )
    handle = await svc.runs.start(request)
    async with svc.runs.watch(handle.run_id) as updates:
        with anyio.fail_after(RUN_WAIT_SECONDS):
            while (update := await updates.get()).kind not in ("waiting", "final"):
                pass
    return update


def refused(update: RunUpdate) -> bool:
    return update.kind == "final" and (update.error or {}).get("code") == "too_many_waiting"


async def test_accounts_at_their_cap_leave_room_for_another_accounts_question(svc: Services) -> None:
    torture = load_project(TORTURE)
    reserved = reserved_waiting(IN_ALL)
    outcomes: dict[int, list[RunUpdate]] = {}
    for account in range(1, FILLERS + 1):  # each asks as many as its own cap allows
        outcomes[account] = [await ask(svc, torture, account) for _ in range(PER_ACCOUNT)]
    # Another account's question is taken (it was refused at once: too_many_waiting).
    newcomer = await ask(svc, torture, 100)
    assert newcomer.kind == "waiting", newcomer

    # The fillers took the places open to all and one reserved place (the last filler's
    # first question); its second was refused, naming the reserve.
    taken = sum(update.kind == "waiting" for done in outcomes.values() for update in done)
    assert taken == IN_ALL - reserved + 1
    last = outcomes[FILLERS]
    assert last[0].kind == "waiting" and refused(last[1]), last
    message = (last[1].error or {})["message"]
    assert "kept for accounts with none waiting" in message and "STEAMHARNESS_MAX_WAITING_RUNS" in message

    # The server's cap still holds for everyone.
    assert reserved == 2 and svc.runs.admission.waiting() == IN_ALL
    full = await ask(svc, torture, 200)
    assert refused(full), full
    assert f"already has {IN_ALL} runs waiting" in (full.error or {})["message"]
