"""What the JSON API answers is described by models (`webui.web.api_models`, each route's
`response_model`): `/openapi.json` names the schema of every JSON success, and the knowledge
base's real answers are what their schemas say."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from jsonschema import Draft202012Validator
from pydantic import SecretStr

from tests import prepared
from tests.web.conftest import HELLO, LEDGER, Web, running
from webui.app import create_app
from webui.settings import Settings

ADMIN_KEY = secrets.token_urlsafe(32)
KB = f"/api/workflows/{HELLO}/knowledge"
ROUTE = "/api/workflows/{project_id}/knowledge"
# JSON successes that are not one answer a model describes, and why.
NOT_A_MODEL = {
    ("get", "/api/workflows/{project_id}/configs/export"): "a download: the export document, as imported",
    ("post", "/api/workflows/{project_id}/configs/export"): "a download: the export document, as imported",
    ("post", "/api/workflows/{project_id}/mcp"): "the MCP endpoint (its own operations: webui.mcp.openapi)",
}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return create_app(Settings(data_dir=Path("/nonexistent/api-answers"))).openapi()  # never started


def success_schemas(doc: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any] | None]]:
    """(method, path, status, its JSON schema) of each success of the JSON API that answers JSON."""
    for path, operations in doc["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, operation in operations.items():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content") or {}
                if status.startswith("2") and "application/json" in content:
                    yield method, path, status, content["application/json"].get("schema")


def test_every_json_answer_of_the_api_is_described_by_a_model(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    undescribed = [
        f"{method.upper()} {path} {status}"
        for method, path, status, schema in success_schemas(doc)
        if (method, path) not in NOT_A_MODEL
        and not (
            schema is not None
            and str(schema.get("$ref", "")).startswith("#/components/schemas/")
            and "properties" in schemas[schema["$ref"].rsplit("/", 1)[1]]
        )
    ]
    assert undescribed == []
    knowledge = {(m, p) for m, p, _, _ in success_schemas(doc) if p.startswith(ROUTE)}
    assert len(knowledge) == 9  # every knowledge route but the export (NDJSON) and a removal (204)
    assert set(NOT_A_MODEL) <= {(m, p) for m, p, _, _ in success_schemas(doc)}  # none stale


def test_the_knowledge_export_says_it_answers_ndjson_not_json(doc: dict[str, Any]) -> None:
    content = doc["paths"][f"{ROUTE}/export"]["get"]["responses"]["200"]["content"]
    assert list(content) == ["application/x-ndjson"]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    data = prepared.copy_prepared("web", tmp_path_factory.mktemp("api-answers") / "data")
    with running(Settings(data_dir=data, server_admin_key=SecretStr(ADMIN_KEY))) as web:
        yield web


def test_the_knowledge_bases_answers_are_what_their_schemas_say(kb: Web, doc: dict[str, Any]) -> None:
    """Each route once, on its good path; every JSON answer checked against the schema
    `/openapi.json` gives for its route and status."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    checked: list[str] = []

    def check(r: httpx2.Response, method: str, route: str) -> Any:
        assert r.status_code < 300, r.text
        schema = doc["paths"][ROUTE + route][method]["responses"][str(r.status_code)]["content"]
        schema = schema["application/json"]["schema"]
        assert "$ref" in schema, (method, route)
        Draft202012Validator({**schema, "components": doc["components"]}).validate(r.json())
        checked.append(f"{method} {route} {r.status_code}")
        return r.json()

    def post(route: str, body: dict[str, Any], path: str | None = None) -> Any:
        return check(kb.client.post(f"{KB}{path or route}", json=body, headers=admin), "post", route)

    def get(route: str, path: str | None = None) -> Any:
        return check(kb.client.get(f"{KB}{path or route}", headers=admin), "get", route)

    assert get("/collections") == {"collections": []}
    post("/collections", {"name": "guides", "language": "english"})
    post("/collections", {"name": "guides"})  # 200: it existed
    get("/collections/{name}", "/collections/guides")
    text = "Green tea is brewed at eighty degrees."
    tea = {"collection": "guides", "id": "tea", "text": text, "metadata": {"k": [1]}}
    assert post("/documents", tea)["status"] == "added"  # 201
    assert post("/documents", tea)["status"] == "unchanged"  # 200
    assert get("/documents")["documents"][0]["id"] == "tea"
    assert get("/documents/{doc_id}", "/documents/tea")["text"] == text
    assert post("/search", {"query": "brewing tea"})["hits"]
    exported = kb.client.get(f"{KB}/export", headers=admin)
    assert [json.loads(line)["type"] for line in exported.text.splitlines()] == ["collection", "document"]
    imported = kb.client.post(
        f"/api/workflows/{LEDGER}/knowledge/import",
        content=exported.content,
        headers={**admin, "Content-Type": "application/x-ndjson"},
    )
    assert check(imported, "post", "/import")["added"] == 1
    removed = kb.client.delete(f"{KB}/collections/guides", headers=admin)
    assert check(removed, "delete", "/collections/{name}") == {"name": "guides", "removedDocuments": 1}
    assert len(checked) == 11 and len({c.rsplit(" ", 1)[0] for c in checked}) == 9  # every described route
