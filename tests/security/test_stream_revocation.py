"""An open conversation stream whose person loses the project stops following the runs it
showed: the re-check's fresh snapshot no longer lists their cards, and their timelines
(status, result) are not pushed any more (the stream used to keep every run it had ever
shown, whatever the person may still see)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from sse_starlette import ServerSentEvent

from tests.helpers import next_update
from tests.security.test_interaction_ownership import add_people, begin, ui_user
from tests.web.conftest import Web, prepare, services
from webui.app import create_app
from webui.auth.ui import UiUser
from webui.web.conversations import Feed, conversation_stream
from webui.web.state import app_state

WAIT = 60


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    settings = prepare(tmp_path / "data")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        page = Web(client, settings)
        add_people(page)
        yield page


def test_a_stream_stops_pushing_timelines_of_a_project_its_person_lost(web: Web) -> None:
    svc = services(web)
    feed = Feed(svc.engine, app_state(web.client.app).templates.env)
    alice = ui_user(web, "alice")
    now: list[UiUser] = [alice]

    async def scenario() -> tuple[str, list[ServerSentEvent]]:
        stream = conversation_stream(feed, svc.hub, alice, lambda: now[0], recheck_seconds=0.5)
        after: list[ServerSentEvent] = []
        try:
            with anyio.fail_after(WAIT):
                assert (await anext(stream)).event == "snapshot"
                run = await begin(svc, alice.account_id, "alice")
                await next_update(svc, run, ("waiting",))
                assert (await anext(stream)).event == "interaction"
                now[0] = dataclasses.replace(alice, projects=frozenset())  # the grant is removed
                fresh = await anext(stream)
                while fresh.event != "snapshot":  # the run's own updates may come first
                    fresh = await anext(stream)
                assert run not in str(fresh.data)
                await svc.runs.cancel(run)
                await next_update(svc, run)
            with anyio.move_on_after(2):
                while True:
                    after.append(await anext(stream))
        finally:
            await stream.aclose()
        return run, after

    assert web.client.portal is not None
    run, after = web.client.portal.call(scenario)
    assert [e for e in after if e.event == f"run-{run}" or run in str(e.data)] == []
