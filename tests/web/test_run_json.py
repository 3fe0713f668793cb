"""The run's JSON (`GET /api/runs/{id}`) reads the run, then its pending question: a
question asked between the two reads is shown only with the run waiting on it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from webui.store import runs as run_store
from webui.store.db import make_engine
from webui.store.models import Interaction, Run
from webui.web.api import run_json


def question(run_id: str) -> Interaction:
    return Interaction(id="ia-1", run_id=run_id, kind="form", title="Where to?", requested_schema={})


def services_with(tmp_path: Path, stored_status: str) -> tuple[SimpleNamespace, Run]:
    engine = make_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    run = Run(id="r-1", project_id="p", entrypoint_id="ep", entrypoint_title="Ep", status=stored_status)
    run_store.create_run(engine, run=run)
    pending = SimpleNamespace(pending_for_run=lambda run_id: question(run_id))
    stale = Run(id="r-1", project_id="p", entrypoint_id="ep", entrypoint_title="Ep", status="running")
    return SimpleNamespace(engine=engine, interactions=pending), stale


def test_a_question_asked_after_the_run_was_read_comes_with_the_status_read_again(tmp_path: Path) -> None:
    services, stale = services_with(tmp_path, "waiting_for_input")
    data = run_json(stale, services, full=False)
    assert data["status"] == "waiting_for_input"
    assert data["interaction"]["interactionId"] == "ia-1"


def test_a_question_answered_before_the_second_read_is_not_shown_with_a_running_run(tmp_path: Path) -> None:
    services, stale = services_with(tmp_path, "running")
    data = run_json(stale, services, full=False)
    assert data["status"] == "running" and "interaction" not in data
