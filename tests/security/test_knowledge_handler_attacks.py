"""Hostile workflow code against the knowledge base: the worker's raw RPC channel cannot
write from a read-only entrypoint, cannot name another project (by id or by an alias its
project does not declare), and bad arguments of every type come back as clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import next_update
from webui.knowledge.model import Actor
from webui.runs.request import RunRequest
from webui.services import open_services
from webui.settings import Settings
from webui.workflows.project import load_project

pytestmark = pytest.mark.anyio

MINE = "a1b2c3d4-0000-4000-8000-0000000000a1"
THEIRS = "a1b2c3d4-0000-4000-8000-0000000000a2"

CODE = """
def attack(ctx):
    chan = ctx._chan
    tries = {
        "rawAdd": lambda: chan.rpc("knowledge.add", collection="docs", text="planted", id="planted"),
        "rawRemove": lambda: chan.rpc("knowledge.remove", id="mine"),
        "otherProjectById": lambda: chan.rpc("knowledge.search", query="secret", project_id=THEIRS),
        "otherProjectGet": lambda: chan.rpc("knowledge.get", id="theirs", projectId=THEIRS),
        "undeclaredAlias": lambda: chan.rpc("related.knowledge.search", alias="theirs", query="secret"),
        "relatedWrite": lambda: chan.rpc("related.knowledge.add", alias="theirs", text="x"),
        "unknownVerb": lambda: chan.rpc("knowledge.drop", collection="docs"),
        "queryType": lambda: chan.rpc("knowledge.search", query={"$ne": 1}),
        "collectionType": lambda: chan.rpc("knowledge.search", query="x", collection={"a": 1}),
        "collectionPath": lambda: chan.rpc("knowledge.search", query="x", collection="../theirs"),
        "limitType": lambda: chan.rpc("knowledge.search", query="x", limit=10**9),
        "modeType": lambda: chan.rpc("knowledge.search", query="x", mode=["text"]),
        "idType": lambda: chan.rpc("knowledge.get", id=["mine"]),
        "filterDeep": lambda: chan.rpc("knowledge.search", query="x", filter={"a": [[[[1]]]]}),
        "sqlInQuery": lambda: chan.rpc("knowledge.search", query="x' OR 1=1; --"),
    }
    out = {}
    for name, call in tries.items():
        try:
            out[name] = {"ok": call()}
        except Exception as exc:
            out[name] = {"error": str(exc)}
    return out
""".replace("THEIRS", repr(THEIRS))


async def test_hostile_handler_code_gets_errors_and_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    doc: dict[str, Any] = {
        "id": MINE,
        "name": "kb-attacker",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"id": "attack", "handler": "kb.py:attack", "params": []}],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "kb.py").write_text(CODE, encoding="utf-8")
    project = load_project(folder)
    ep = project.entrypoint("attack")
    assert ep is not None
    admin = Actor("admin", "test")
    async with open_services(Settings(data_dir=tmp_path / "d", kill_grace_seconds=0.2)) as svc:
        svc.knowledge.add(MINE, "docs", actor=admin, doc_id="mine", text="x marks my document")
        svc.knowledge.add(THEIRS, "docs", actor=admin, doc_id="theirs", text="their secret x")
        handle = await svc.runs.start(RunRequest(project=project, entrypoint=ep, params={}, stored_params={}))
        final = await next_update(svc, handle.run_id)
        assert final.status == "success", final.error
        out = final.output
        for name in ("rawAdd", "rawRemove"):
            assert "may only read the knowledge base" in out[name]["error"], name
        hits = out["otherProjectById"]["ok"]["hits"]
        assert hits == []  # "secret" is only in their project: the extra argument is ignored
        assert out["otherProjectGet"] == {"ok": None}
        assert "this run may use no related projects" in out["undeclaredAlias"]["error"]
        assert "unknown operation" in out["relatedWrite"]["error"]
        assert "unknown operation knowledge.drop" in out["unknownVerb"]["error"]
        assert out["queryType"]["error"] == "the query must be a string"
        assert "collection must be a name or a non-empty list of names" in out["collectionType"]["error"]
        assert "invalid collection name" in out["collectionPath"]["error"]
        assert "limit must be an integer from 1 to 50" in out["limitType"]["error"]
        assert "mode must be auto, text, vector or hybrid" in out["modeType"]["error"]
        assert "invalid document id" in out["idType"]["error"]
        assert "values must be strings" in out["filterDeep"]["error"]
        assert [h["documentId"] for h in out["sqlInQuery"]["ok"]["hits"]] == []  # "or" and "1" required too
        assert svc.knowledge.get(MINE, "planted") is None and svc.knowledge.get(MINE, "mine") is not None
        assert svc.knowledge.collection(THEIRS, "docs")["documents"] == 1
