"""The knowledge base's JSON API on the real app and its real store: every route's good path
(collections, documents from JSON and from uploaded files, pages, search, export and import),
who may read and who may write (the server admin key, keys by scope and project, browser
users by grant and role, CSRF on browser writes), and the audit rows its writes leave."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from pydantic import SecretStr

from tests.knowledge.files import docx, pdf
from tests.web.conftest import ADMIN, HELLO, INTERACTIVE, LEDGER, USER, AppSlot, Web, audit, engine, restarted
from webui.admin import create_key
from webui.settings import Settings
from webui.web.state import app_state

ADMIN_KEY = secrets.token_urlsafe(32)
BASE = f"/api/workflows/{HELLO}/knowledge"


@pytest.fixture(scope="module")
def kb_app(tmp_path_factory: pytest.TempPathFactory) -> AppSlot:
    data = tmp_path_factory.mktemp("kb") / "data"
    return AppSlot(Settings(data_dir=data, server_admin_key=SecretStr(ADMIN_KEY)))


@pytest.fixture
def kb(kb_app: AppSlot) -> Iterator[Web]:
    """The page tests' app (an admin, `ann` granted hello and interactive) with a server admin
    key, on a store of the test's own (`restarted`)."""
    with restarted(kb_app) as web:
        yield web


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def key(
    web: Web, scopes: list[str], projects: list[str] | None = None, user: str = USER[0]
) -> dict[str, str]:
    raw, _ = create_key(engine(web), user=user, projects=projects, scopes=scopes, name=None)
    return {"Authorization": f"Bearer {raw}"}


def add(web: Web, headers: dict[str, str], base: str = BASE, **doc: Any) -> httpx2.Response:
    return web.client.post(f"{base}/documents", json={"collection": "guides", **doc}, headers=headers)


def error(r: httpx2.Response) -> dict[str, Any]:
    return r.json()["error"]


def ndjson(r: httpx2.Response) -> list[dict[str, Any]]:
    """The lines of an NDJSON body (split at newlines only: U+2028 may be inside a string)."""
    return [json.loads(line) for line in r.text.split("\n") if line]


# --------------------------------------------------------------------------- good paths


def test_a_collection_is_created_once_listed_shown_and_removed_with_its_documents(kb: Web) -> None:
    made = kb.client.post(
        f"{BASE}/collections", json={"name": "guides", "language": "english"}, headers=admin()
    )
    assert made.status_code == 201, made.text
    assert made.json()["created"] is True and made.json()["language"] == "english"
    again = kb.client.post(f"{BASE}/collections", json={"name": "guides"}, headers=admin())
    assert again.status_code == 200 and again.json()["created"] is False
    assert add(kb, admin(), text="How to brew tea.").status_code == 201
    listed = kb.client.get(f"{BASE}/collections", headers=admin())
    assert listed.status_code == 200
    assert [(c["name"], c["documents"]) for c in listed.json()["collections"]] == [("guides", 1)]
    shown = kb.client.get(f"{BASE}/collections/guides", headers=admin())
    assert shown.status_code == 200 and shown.json()["documents"] == 1
    removed = kb.client.delete(f"{BASE}/collections/guides", headers=admin())
    assert removed.status_code == 200 and removed.json() == {"name": "guides", "removedDocuments": 1}
    gone = kb.client.get(f"{BASE}/collections/guides", headers=admin())
    assert gone.status_code == 404 and error(gone)["code"] == "not_found"
    assert kb.client.delete(f"{BASE}/collections/guides", headers=admin()).status_code == 404


def test_a_collection_of_another_language_or_a_bad_name_is_refused(kb: Web) -> None:
    assert kb.client.post(f"{BASE}/collections", json={"name": "g"}, headers=admin()).status_code == 201
    other = kb.client.post(f"{BASE}/collections", json={"name": "g", "language": "german"}, headers=admin())
    assert other.status_code == 400 and "exists with language 'english'" in error(other)["message"]
    for body, says in (
        ({"name": "../x"}, "invalid collection name"),
        ({}, "invalid collection name"),
        ({"name": "g", "language": 3}, "language: expected a string"),
        ({"name": "g", "language": "klingon"}, "unknown language 'klingon'"),
        ({"name": "g", "colour": "red"}, "unknown member 'colour'"),
    ):
        r = kb.client.post(f"{BASE}/collections", json=body, headers=admin())
        assert r.status_code == 400, (body, r.text)
        assert error(r)["code"] == "invalid_knowledge" and says in error(r)["message"], r.text


def test_a_document_is_added_then_unchanged_updated_replaced_read_and_removed(kb: Web) -> None:
    first = add(kb, admin(), id="tea", text="How to brew green tea.", metadata={"lang": "en"})
    assert first.status_code == 201, first.text
    assert first.json()["status"] == "added" and first.json()["id"] == "tea"
    assert first.json()["title"] == "How to brew green tea." and "text" not in first.json()
    same = add(kb, admin(), id="tea", text="How to brew green tea.", metadata={"lang": "en"})
    assert same.status_code == 200 and same.json()["status"] == "unchanged"
    titled = add(kb, admin(), id="tea", text="How to brew green tea.", metadata={"lang": "en"}, title="Tea")
    assert titled.status_code == 200 and titled.json()["status"] == "updated"
    replaced = add(kb, admin(), id="tea", text="How to brew black tea.", title="Tea")
    assert replaced.status_code == 200 and replaced.json()["status"] == "replaced"
    shown = kb.client.get(f"{BASE}/documents/tea", headers=admin())
    assert shown.status_code == 200
    assert (shown.json()["text"], shown.json()["title"], shown.json()["metadata"]) == (
        "How to brew black tea.",
        "Tea",
        {},
    )
    assert kb.client.delete(f"{BASE}/documents/tea", headers=admin()).status_code == 204
    for method in ("GET", "DELETE"):
        r = kb.client.request(method, f"{BASE}/documents/tea", headers=admin())
        assert r.status_code == 404 and error(r) == {
            "code": "not_found",
            "message": "document 'tea' not found",
        }


def test_documents_are_paged_by_id_and_filtered_by_metadata(kb: Web) -> None:
    for n in range(5):
        r = add(kb, admin(), id=f"doc-{n}", text=f"Document number {n}.", metadata={"even": n % 2 == 0})
        assert r.status_code == 201, r.text
    add(kb, admin(), collection="other", id="elsewhere", text="Another collection.")
    page = kb.client.get(f"{BASE}/documents", params={"collection": "guides", "limit": 2}, headers=admin())
    assert page.status_code == 200, page.text
    assert [d["id"] for d in page.json()["documents"]] == ["doc-0", "doc-1"]
    assert page.json()["next"] == "doc-1" and "text" not in page.json()["documents"][0]
    rest = kb.client.get(
        f"{BASE}/documents", params={"collection": "guides", "after": "doc-1"}, headers=admin()
    )
    assert [d["id"] for d in rest.json()["documents"]] == ["doc-2", "doc-3", "doc-4"]
    assert rest.json()["next"] is None
    even = kb.client.get(f"{BASE}/documents", params={"filter": '{"even": true}'}, headers=admin())
    assert [d["id"] for d in even.json()["documents"]] == ["doc-0", "doc-2", "doc-4"]
    everything = kb.client.get(f"{BASE}/documents", headers=admin())
    assert len(everything.json()["documents"]) == 6
    unknown = kb.client.get(f"{BASE}/documents", params={"collection": "nope"}, headers=admin())
    assert unknown.status_code == 404 and "collection 'nope' not found" in error(unknown)["message"]


def test_a_search_returns_ranked_hits_with_snippets_and_highlights(kb: Web) -> None:
    add(kb, admin(), id="tea", text="Green tea is brewed at eighty degrees.", metadata={"kind": "tea"})
    add(kb, admin(), id="coffee", text="Coffee is brewed with boiling water.", metadata={"kind": "coffee"})
    add(kb, admin(), collection="other", id="cake", text="Cake is baked, never brewed.")
    r = kb.client.post(f"{BASE}/search", json={"query": "brewing tea"}, headers=admin())
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == "text"
    [hit] = r.json()["hits"]
    assert hit["documentId"] == "tea" and hit["collection"] == "guides" and "tea" in hit["snippet"].lower()
    assert hit["highlights"]
    brewed = kb.client.post(
        f"{BASE}/search",
        json={"query": "brewed", "collection": "guides", "filter": {"kind": ["coffee"]}, "limit": 5},
        headers=admin(),
    )
    assert [h["documentId"] for h in brewed.json()["hits"]] == ["coffee"]
    everywhere = kb.client.post(f"{BASE}/search", json={"query": "brewed", "mode": "text"}, headers=admin())
    assert {h["documentId"] for h in everywhere.json()["hits"]} == {"tea", "coffee", "cake"}
    for body, says in (
        ({"query": "tea", "mode": "vector"}, "needs an embedding endpoint"),
        ({"query": "tea", "mode": "psychic"}, "mode must be"),
        ({"query": "tea", "limit": 0}, "limit must be an integer from 1 to 50"),
        ({"query": 7}, "the query must be a string"),
        ({}, "query: the words to search for are missing"),
        ({"query": "tea", "top": 3}, "unknown member 'top'"),
    ):
        refused = kb.client.post(f"{BASE}/search", json=body, headers=admin())
        assert refused.status_code == 400 and says in error(refused)["message"], (body, refused.text)
    missing = kb.client.post(f"{BASE}/search", json={"query": "tea", "collection": "nope"}, headers=admin())
    assert missing.status_code == 404


def test_a_text_file_uploaded_as_multipart_becomes_a_document(kb: Web) -> None:
    r = kb.client.post(
        f"{BASE}/documents",
        data={"collection": "files", "id": "notes", "metadata": '{"from": "upload"}'},
        files={"file": ("folder/notes.txt", b"Uploaded notes about kettles.\n", "text/plain")},
        headers=admin(),
    )
    assert r.status_code == 201, r.text
    assert (r.json()["status"], r.json()["source"], r.json()["title"]) == ("added", "notes.txt", "notes.txt")
    assert r.json()["metadata"] == {"from": "upload"}
    shown = kb.client.get(f"{BASE}/documents/notes", headers=admin()).json()
    assert shown["text"] == "Uploaded notes about kettles.\n"
    again = kb.client.post(
        f"{BASE}/documents",
        data={"collection": "files", "id": "notes", "metadata": '{"from": "upload"}'},
        files={"file": ("notes.txt", b"Uploaded notes about kettles.\n", "text/plain")},
        headers=admin(),
    )
    assert again.status_code == 200 and again.json()["status"] == "unchanged"  # the same file again
    hits = kb.client.post(f"{BASE}/search", json={"query": "kettles"}, headers=admin()).json()["hits"]
    assert [h["documentId"] for h in hits] == ["notes"]


def test_a_pdf_and_a_docx_upload_are_read_and_a_broken_pdf_is_refused_naming_the_file(kb: Web) -> None:
    for name, data, text in (
        ("report.pdf", pdf("Quarterly figures rose."), "Quarterly figures rose."),
        ("memo.docx", docx("A memo about printers."), "A memo about printers."),
    ):
        r = kb.client.post(
            f"{BASE}/documents", data={"collection": "files"}, files={"file": (name, data)}, headers=admin()
        )
        assert r.status_code == 201, r.text
        assert r.json()["source"] == name
        assert text in kb.client.get(f"{BASE}/documents/{r.json()['id']}", headers=admin()).json()["text"]
    broken = kb.client.post(
        f"{BASE}/documents",
        data={"collection": "files"},
        files={"file": ("broken.pdf", b"%PDF-1.4\nthis is not a pdf at all", "application/pdf")},
        headers=admin(),
    )
    assert broken.status_code == 400, broken.text
    assert error(broken)["code"] == "invalid_knowledge" and error(broken)["message"].startswith("broken.pdf:")
    unknown_kind = kb.client.post(
        f"{BASE}/documents", data={"collection": "files"}, files={"file": ("run.exe", b"MZ")}, headers=admin()
    )
    assert unknown_kind.status_code == 400 and "run.exe: cannot add a file of this kind" in unknown_kind.text
    assert len(kb.client.get(f"{BASE}/documents", headers=admin()).json()["documents"]) == 2


def test_a_multipart_upload_without_its_file_or_collection_is_a_422_naming_the_field(kb: Web) -> None:
    for data, files, field, says in (
        ({"collection": "files"}, {"other": ("a.txt", b"x")}, "body.other", "unknown field"),
        ({"collection": "files", "file": "not a file"}, {"x": ("a.txt", b"x")}, "body.x", "unknown field"),
        ({"collection": "files", "id": "a"}, {"title": ("t.txt", b"x")}, "body.title", "not a file"),
        ({"collection": "files"}, {"title": (None, "t")}, "body.file", "expected a file"),
        (
            {},
            {"file": ("a.txt", b"some text")},
            "body.collection",
            "collection to add the file to is missing",
        ),
        ({"collection": "files"}, {"file": ("", b"some text")}, "body.file", None),
    ):
        r = kb.client.post(f"{BASE}/documents", data=data, files=files, headers=admin())
        if says is None:  # a part without a filename is a text field to the parser
            assert r.status_code == 422 and field in error(r)["fields"], r.text
            continue
        assert r.status_code == 422, (data, r.text)
        assert error(r)["code"] == "invalid_request" and says in error(r)["fields"][field], r.text
    form = kb.client.post(f"{BASE}/documents", data={"collection": "files"}, headers=admin())
    assert form.status_code == 400 and "multipart/form-data" in error(form)["message"], form.text
    # Metadata that is not JSON is refused before anything is written.
    bad = kb.client.post(
        f"{BASE}/documents",
        data={"collection": "files", "metadata": "{oops"},
        files={"file": ("a.txt", b"text")},
        headers=admin(),
    )
    assert bad.status_code == 400 and "metadata is not valid JSON" in error(bad)["message"]
    assert kb.client.get(f"{BASE}/documents", headers=admin()).json()["documents"] == []


def test_an_export_imports_into_another_project_the_same_and_both_are_audited(kb: Web) -> None:
    kb.client.post(f"{BASE}/collections", json={"name": "deutsch", "language": "german"}, headers=admin())
    add(kb, admin(), collection="deutsch", id="haus", text="Die Häuser sind groß.", metadata={"n": [1, 2]})
    add(kb, admin(), id="tea", text="Tea\u2028with a line separator inside.", title="Tea")
    exported = kb.client.get(f"{BASE}/export", headers=admin())
    assert exported.status_code == 200, exported.text
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    assert exported.headers["cache-control"] == "no-store"
    lines = ndjson(exported)
    assert [line["type"] for line in lines] == ["collection", "document", "collection", "document"]
    target = f"/api/workflows/{LEDGER}/knowledge"
    imported = kb.client.post(
        f"{target}/import",
        content=exported.content,
        headers={**admin(), "Content-Type": "application/x-ndjson"},
    )
    assert imported.status_code == 200, imported.text
    assert imported.json() == {"collections": 2, "added": 2, "replaced": 0, "updated": 0, "unchanged": 0}
    assert ndjson(kb.client.get(f"{target}/export", headers=admin())) == lines
    german = kb.client.post(f"{target}/search", json={"query": "haus"}, headers=admin()).json()["hits"]
    assert [h["documentId"] for h in german] == ["haus"]  # stemmed as German: Häuser -> haus
    one = kb.client.get(f"{BASE}/export", params={"collection": "deutsch"}, headers=admin())
    assert [line.get("id") for line in ndjson(one)] == [None, "haus"]
    assert kb.client.get(f"{BASE}/export", params={"collection": "nope"}, headers=admin()).status_code == 404
    events = audit(kb, "knowledge.exported")
    assert [(e.project_id, e.actor, e.source, e.details) for e in events] == [
        (HELLO, "admin", "api", {"collection": None, "collections": 2, "documents": 2}),
        (LEDGER, "admin", "api", {"collection": None, "collections": 2, "documents": 2}),
        (HELLO, "admin", "api", {"collection": "deutsch", "collections": 1, "documents": 1}),
    ]
    [event] = audit(kb, "knowledge.imported")
    assert (event.project_id, event.actor, event.source, event.client_address) == (
        LEDGER,
        "admin",
        "api",
        "testclient",
    )
    assert event.details == {
        "bytes": len(exported.content),
        "collections": 2,
        "added": 2,
        "replaced": 0,
        "updated": 0,
        "unchanged": 0,
    }
    again = kb.client.post(f"{target}/import", content=exported.content, headers=admin())
    assert again.json()["unchanged"] == 2 and again.json()["collections"] == 0


def test_every_write_is_audited_with_who_did_it_from_where(kb: Web) -> None:
    writer = key(kb, ["knowledge"])
    agent = {**writer, "User-Agent": "kb-test/1.0"}
    kb.client.post(f"{BASE}/collections", json={"name": "guides"}, headers=agent)
    add(kb, agent, id="tea", text="Tea.")
    add(kb, agent, id="tea", text="Tea.", title="Tea")
    add(kb, agent, id="tea", text="More tea.")
    kb.client.delete(f"{BASE}/documents/tea", headers=agent)
    kb.client.delete(f"{BASE}/collections/guides", headers=agent)
    for event, target in (
        ("knowledge.collection.created", "guides"),
        ("knowledge.document.added", "tea"),
        ("knowledge.document.updated", "tea"),
        ("knowledge.document.replaced", "tea"),
        ("knowledge.document.removed", "tea"),
        ("knowledge.collection.removed", "guides"),
    ):
        [row] = audit(kb, event)
        assert (row.actor, row.project_id, row.target, row.source) == (
            f"user:{USER[0]}",
            HELLO,
            target,
            "api",
        )
        assert (row.client_address, row.user_agent) == ("testclient", "kb-test/1.0")


# --------------------------------------------------------------------------- who may


def test_without_a_credential_every_route_is_a_401(kb: Web) -> None:
    for method, path in (
        ("GET", "/collections"),
        ("POST", "/collections"),
        ("GET", "/documents"),
        ("POST", "/search"),
        ("GET", "/export"),
        ("POST", "/import"),
        ("DELETE", "/documents/x"),
    ):
        r = kb.client.request(method, f"{BASE}{path}", content=b"{}")
        assert r.status_code == 401, (method, path, r.text)
        assert error(r)["code"] == "unauthorized"


def test_a_read_only_key_reads_but_its_writes_are_403_naming_the_knowledge_scope(kb: Web) -> None:
    add(kb, admin(), id="tea", text="Tea.")
    reader = key(kb, ["runs.read"])
    assert kb.client.get(f"{BASE}/collections", headers=reader).status_code == 200
    assert kb.client.get(f"{BASE}/documents/tea", headers=reader).json()["text"] == "Tea."
    assert kb.client.post(f"{BASE}/search", json={"query": "tea"}, headers=reader).status_code == 200
    assert kb.client.get(f"{BASE}/export", headers=reader).status_code == 200
    for method, path, body in (
        ("POST", "/collections", {"name": "x"}),
        ("DELETE", "/collections/guides", None),
        ("POST", "/documents", {"collection": "guides", "text": "x"}),
        ("DELETE", "/documents/tea", None),
        ("POST", "/import", None),
    ):
        r = kb.client.request(method, f"{BASE}{path}", json=body, headers=reader)
        assert r.status_code == 403, (method, path, r.text)
        assert error(r) == {
            "code": "forbidden",
            "message": "this API key lacks the knowledge scope (create a key with --scope knowledge)",
        }
    assert kb.client.get(f"{BASE}/documents/tea", headers=reader).status_code == 200


def test_a_knowledge_key_writes_and_reads_the_projects_it_is_granted(kb: Web) -> None:
    writer = key(kb, ["knowledge"])
    r = add(kb, writer, id="tea", text="Tea.")
    assert r.status_code == 201, r.text
    assert kb.client.get(f"{BASE}/documents/tea", headers=writer).status_code == 200
    other = f"/api/workflows/{INTERACTIVE}/knowledge"
    assert add(kb, writer, base=other, id="tea2", text="Tea.").status_code == 201


def test_another_accounts_project_an_unknown_one_and_a_keys_excluded_one_are_all_404(kb: Web) -> None:
    unknown = kb.client.get("/api/workflows/no-such-project/knowledge/collections", headers=admin())
    assert unknown.status_code == 404
    assert error(unknown) == {"code": "not_found", "message": "project 'no-such-project' is not registered"}
    ledger = f"/api/workflows/{LEDGER}/knowledge"
    hello_only = key(kb, ["knowledge", "runs.create"], projects=[HELLO])
    cases = (
        (key(kb, ["knowledge", "runs.create"]), ledger),  # ann is not granted ledger
        (key(kb, ["runs.read"]), ledger),
        (hello_only, f"/api/workflows/{INTERACTIVE}/knowledge"),  # granted, not to this key
    )
    for headers, base in cases:
        project = base.split("/")[3]
        for method, path, body in (
            ("GET", "/collections", None),
            ("GET", "/documents/tea", None),
            ("POST", "/search", {"query": "tea"}),
            ("GET", "/export", None),
            ("POST", "/documents", {"collection": "guides", "text": "x"}),
            ("POST", "/import", None),
        ):
            r = kb.client.request(method, f"{base}{path}", json=body, headers=headers)
            assert r.status_code == 404, (base, method, path, r.text)
            assert error(r) == {"code": "not_found", "message": f"project {project!r} is not registered"}
    # A key of another account sees none of what was written there.
    add(kb, admin(), base=ledger, id="secret", text="Ledger secrets.")
    stranger = key(kb, ["runs.create", "knowledge"])
    assert kb.client.get(f"{ledger}/documents/secret", headers=stranger).status_code == 404


def test_a_document_of_another_project_is_not_found_through_this_projects_url(kb: Web) -> None:
    ledger = f"/api/workflows/{LEDGER}/knowledge"
    assert add(kb, admin(), base=ledger, id="ledger-doc", text="Only in the ledger.").status_code == 201
    writer = key(kb, ["knowledge"])
    for method in ("GET", "DELETE"):
        r = kb.client.request(method, f"{BASE}/documents/ledger-doc", headers=writer)
        assert r.status_code == 404, r.text
    hits = kb.client.post(f"{BASE}/search", json={"query": "ledger"}, headers=writer).json()["hits"]
    assert hits == []
    assert kb.client.get(f"{BASE}/documents", headers=writer).json()["documents"] == []
    # The same id in this project is a document of its own; the ledger's stays as it was.
    assert add(kb, writer, id="ledger-doc", text="Hello's own.").status_code == 201
    assert (
        kb.client.get(f"{ledger}/documents/ledger-doc", headers=admin()).json()["text"]
        == "Only in the ledger."
    )


def test_a_browser_user_reads_granted_projects_and_only_an_administrator_writes(kb: Web) -> None:
    add(kb, admin(), id="tea", text="Tea.")
    token = kb.login(*USER)
    assert kb.client.get(f"{BASE}/documents/tea").status_code == 200
    assert (
        kb.client.post(f"{BASE}/search", json={"query": "tea"}, headers={"X-CSRF-Token": token}).status_code
        == 200
    )
    ledger = kb.client.get(f"/api/workflows/{LEDGER}/knowledge/collections")
    assert ledger.status_code == 404 and error(ledger)["code"] == "not_found"
    refused = add(kb, {"X-CSRF-Token": token}, text="Ann's tea.")
    assert refused.status_code == 403
    assert "only an administrator may change a project's knowledge base" in error(refused)["message"]
    kb.logout()
    token = kb.login(*ADMIN)
    r = add(kb, {"X-CSRF-Token": token}, id="root-tea", text="Root's tea.")
    assert r.status_code == 201, r.text
    [row] = [e for e in audit(kb, "knowledge.document.added") if e.target == "root-tea"]
    assert (row.actor, row.source) == (f"user:{ADMIN[0]}", "ui")
    ledger_write = add(kb, {"X-CSRF-Token": token}, base=f"/api/workflows/{LEDGER}/knowledge", text="x")
    assert ledger_write.status_code == 201  # administrators see every project


def test_a_browser_write_without_its_csrf_token_is_403_and_writes_nothing(kb: Web) -> None:
    kb.login(*ADMIN)
    for headers in ({}, {"X-CSRF-Token": "forged"}):
        for method, path, body in (
            ("POST", "/collections", {"name": "x"}),
            ("POST", "/documents", {"collection": "x", "text": "x"}),
            ("DELETE", "/documents/x", None),
            ("POST", "/import", None),
            ("POST", "/search", {"query": "x"}),
        ):
            r = kb.client.request(method, f"{BASE}{path}", json=body, headers=headers)
            assert r.status_code == 403, (method, path, r.text)
            assert error(r)["code"] == "csrf" and "reload the page" in error(r)["message"], r.text
    assert kb.client.get(f"{BASE}/collections").json() == {"collections": []}


def test_the_guard_lets_a_browser_session_reach_the_knowledge_api(kb: Web) -> None:
    kb.login(*ADMIN)
    assert kb.client.get(f"{BASE}/collections").status_code == 200


def test_the_key_scopes_page_offers_the_knowledge_scope(kb: Web) -> None:
    kb.login(*USER)
    page = kb.client.get("/keys")
    assert page.status_code == 200
    assert 'value="knowledge"' in page.text
    assert "Change the knowledge base of the key" in page.text


def test_an_accounts_searches_and_exports_past_its_read_slots_are_429_with_retry_after(kb: Web) -> None:
    """Searches and exports are heavy reads: an account running as many as it may is refused
    the next one at once (another account is not); a slot given back is taken again."""
    add(kb, admin(), id="tea", text="How to brew tea.")
    reads = app_state(kb.client.app).services.knowledge.reads
    held = [reads.take("admin") for _ in range(reads.limit)]  # the admin key's account: "admin"
    search = kb.client.post(f"{BASE}/search", json={"query": "tea"}, headers=admin())
    export = kb.client.get(f"{BASE}/export", headers=admin())
    for r in (search, export):
        assert r.status_code == 429, r.text
        assert error(r)["code"] == "too_many_reads" and r.headers["retry-after"] == "1"
    other = key(kb, ["runs.read"], [HELLO])
    assert kb.client.post(f"{BASE}/search", json={"query": "tea"}, headers=other).status_code == 200
    held.pop()()
    assert kb.client.post(f"{BASE}/search", json={"query": "tea"}, headers=admin()).status_code == 200
    assert kb.client.get(f"{BASE}/export", headers=admin()).status_code == 200
    assert reads.held("admin") == reads.limit - 1  # the export gave its slot back once sent
    for release in held:
        release()
