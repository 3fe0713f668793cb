"""`ctx.knowledge` in real workers: a handler searches and reads its project's knowledge
base; only an entrypoint that declares `"knowledge": "write"` adds and removes; a related
project's knowledge base is read-only; where the store lives follows the data dirs."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from tests import prepared
from tests.helpers import next_update
from webui.knowledge.model import Actor
from webui.runs.related import LocalRelations
from webui.runs.request import RunRequest
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store.models import AuditEvent
from webui.workflows.project import Project, load_project

pytestmark = pytest.mark.anyio

OWNER = "a1b2c3d4-0000-4000-8000-0000000000f1"
OTHER = "a1b2c3d4-0000-4000-8000-0000000000f2"
ADMIN = Actor("admin", "test")

CODE = """
def look(ctx):
    hits = ctx.knowledge.search(ctx.params["q"], limit=5)
    first = ctx.knowledge.get(hits[0]["documentId"]) if hits else None
    return {"hits": [h["documentId"] for h in hits], "snippet": hits[0]["snippet"] if hits else None,
            "text": first["text"] if first else None, "missing": ctx.knowledge.get("nope")}


def sneak(ctx):
    out = {}
    for name, call in [("add", lambda: ctx.knowledge.add("docs", "written by a reader")),
                       ("remove", lambda: ctx.knowledge.remove("owl")),
                       ("relatedSearch", lambda: ctx.related["other"].knowledge.search("secret")),
                       ("relatedAdd", lambda: ctx.related["other"].knowledge.add("docs", "x")),
                       ("badQuery", lambda: ctx.knowledge.search("***")),
                       ("badFilter", lambda: ctx.knowledge.search("owl", filter="x"))]:
        try:
            out[name] = call()
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def write(ctx):
    added = ctx.knowledge.add("notes", "the handler wrote this note", id="note-1", metadata={"by": "run"})
    gone = ctx.knowledge.remove("owl")
    found = [h["documentId"] for h in ctx.knowledge.search("note")]
    return {"status": added["status"], "gone": gone, "found": found}
"""


def project(folder: Path, project_id: str, related_id: str, alias: str) -> Project:
    doc: dict[str, Any] = {
        "id": project_id,
        "name": f"kb-{alias}",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": [{"alias": alias, "id": related_id}],
        "entrypoints": [
            {
                "id": "look",
                "handler": "kb.py:look",
                "params": [{"name": "q", "type": "string", "required": True}],
            },
            {"id": "sneak", "handler": "kb.py:sneak", "params": []},
            {"id": "write", "handler": "kb.py:write", "knowledge": "write", "params": []},
        ],
    }
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "kb.py").write_text(CODE, encoding="utf-8")
    return load_project(folder)


async def run(svc: Services, owner: Project, ep_id: str, params: dict[str, Any], other: Path) -> Any:
    relations = LocalRelations.confirm(owner, {"other": str(other)}, lambda root: dict(os.environ))
    ep = owner.entrypoint(ep_id)
    assert ep is not None
    handle = await svc.runs.start(
        RunRequest(
            project=owner, entrypoint=ep, params=params, stored_params=params,
            relations=relations, related=relations.paths(),
        )
    )  # fmt: skip
    final = await next_update(svc, handle.run_id)
    assert final.status == "success", final.error
    return final.output


async def fill(svc: Services) -> None:
    add = svc.knowledge.add
    add(OWNER, "docs", actor=ADMIN, doc_id="owl", text="The owl hunts at night in the quiet forest.")
    add(OWNER, "docs", actor=ADMIN, doc_id="cat", text="The cat sleeps all day.")
    add(OTHER, "docs", actor=ADMIN, doc_id="their-secret", text="their secret plans")


async def test_a_handler_searches_and_reads_but_writes_only_where_declared(tmp_path: Path) -> None:
    owner = project(tmp_path / "owner", OWNER, OTHER, "other")
    other_dir = tmp_path / "other"
    project(other_dir, OTHER, OWNER, "owner")
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "d", kill_grace_seconds=0.2)) as svc:
        await fill(svc)
        looked = await run(svc, owner, "look", {"q": "owls hunting"}, other_dir)
        assert looked["hits"] == ["owl"] and looked["missing"] is None
        assert looked["text"] == "The owl hunts at night in the quiet forest."
        assert "owl" in looked["snippet"]
        assert (await run(svc, owner, "look", {"q": "secret"}, other_dir))["hits"] == []

        sneaked = await run(svc, owner, "sneak", {}, other_dir)
        assert sneaked["add"] == sneaked["remove"].replace("remove", "add")
        assert 'may only read the knowledge base (declare "knowledge": "write")' in sneaked["add"]
        assert [h["documentId"] for h in sneaked["relatedSearch"]] == ["their-secret"]
        assert "its knowledge base is read-only here" in sneaked["relatedAdd"]
        assert "no words to search for" in sneaked["badQuery"]
        assert "a filter is a JSON object" in sneaked["badFilter"]
        assert svc.knowledge.get(OWNER, "owl") is not None

        wrote = await run(svc, owner, "write", {}, other_dir)
        assert wrote == {"status": "added", "gone": True, "found": ["note-1"]}
        assert svc.knowledge.get(OWNER, "owl") is None
        assert svc.knowledge.get(OTHER, "their-secret") is not None
        with Session(svc.engine) as s:
            rows = s.exec(select(AuditEvent).where(col(AuditEvent.event).like("knowledge.document.%"))).all()
            by_run = [(r.event, r.target, r.source) for r in rows if r.run_id]
        assert by_run == [
            ("knowledge.document.added", "note-1", "run"),
            ("knowledge.document.removed", "owl", "run"),
        ]


async def test_the_knowledge_base_lives_in_the_persistent_value_store_dir_when_given(tmp_path: Path) -> None:
    values_dir = tmp_path / "values"
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    settings = Settings(data_dir=tmp_path / "d", persistent_value_store_dir=values_dir)
    async with open_services(settings) as svc:
        svc.knowledge.add(OWNER, "docs", actor=ADMIN, doc_id="here", text="kept apart")
        assert svc.knowledge.search(OWNER, "apart")["hits"][0]["documentId"] == "here"
    with sqlite3.connect(values_dir / "values.sqlite3") as con:
        assert con.execute("select doc_id from knowledge_documents").fetchall() == [("here",)]
    with sqlite3.connect(tmp_path / "d" / "steamharness.sqlite3") as con:
        assert con.execute("select count(*) from knowledge_documents").fetchone() == (0,)
        # the write is still audited in the main store
        assert con.execute("select target from audit_events where event like 'knowledge.%'").fetchall() == [
            ("docs",), ("here",),
        ]  # fmt: skip
