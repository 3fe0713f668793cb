"""The knowledge-base page of a project through TestClient: who sees it and who may change
it, the collections and the paged document list, search with highlights, uploads as a plain
multipart form (and as the page's script sends them), removals."""

from __future__ import annotations

from typing import Any

import pytest

from tests.knowledge.files import pdf
from tests.web.conftest import ADMIN, HELLO, LEDGER, USER, Web, rendered
from webui.knowledge.model import Actor
from webui.web.state import app_state

ACTOR = Actor(actor="test", source="cli")


def kb(web: Web) -> Any:
    return app_state(web.client.app).services.knowledge


def url(project: str = HELLO, tail: str = "") -> str:
    return f"/projects/{project}/knowledge{tail}"


def upload(
    web: Web, csrf: str | None, files: list[tuple[str, bytes]], project: str = HELLO, **fields: str
) -> Any:
    data = {"collection": "docs", **fields}
    if csrf is not None:
        data["csrf_token"] = csrf
    parts = [("files", (name, body, "application/octet-stream")) for name, body in files]
    return web.client.post(url(project, "/upload"), data=data, files=parts, follow_redirects=False)


def test_an_anonymous_visitor_is_sent_to_the_login_page(web: Web) -> None:
    r = web.client.get(url(), follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")


def test_a_person_without_the_project_gets_404_for_its_page_and_documents(web: Web) -> None:
    kb(web).add(LEDGER, "docs", actor=ACTOR, text="ledger secret", doc_id="led-1")
    web.login(*USER)
    assert web.client.get(url(LEDGER)).status_code == 404
    assert web.client.get(url(LEDGER, "/documents/led-1")).status_code == 404
    assert web.client.get(url("no-such-project")).status_code == 404


def test_an_admin_sees_collections_documents_and_the_forms(web: Web) -> None:
    kb(web).create_collection(HELLO, "notes", language="german", actor=ACTOR)
    kb(web).add(HELLO, "docs", actor=ACTOR, text="The quick brown fox", doc_id="fox", title="Fox story")
    web.login(*ADMIN)
    r = web.client.get(url())
    assert r.status_code == 200
    ctx = rendered(r).context
    assert rendered(r).template == "projects/knowledge.html"
    assert {c["name"]: c["language"] for c in ctx["collections"]} == {"docs": "english", "notes": "german"}
    assert [d["id"] for d in ctx["documents"]] == ["fox"]
    assert 'id="knowledge-upload"' in r.text and 'enctype="multipart/form-data"' in r.text
    assert 'id="create-collection"' in r.text and '<option value="german">' in r.text
    assert "/static/js/knowledge.js" in r.text and "<progress" in r.text
    assert "Fox story" in r.text and ">Remove</button>" in r.text


def test_a_member_sees_the_page_read_only(web: Web) -> None:
    kb(web).add(HELLO, "docs", actor=ACTOR, text="The quick brown fox", doc_id="fox")
    web.login(*USER)
    r = web.client.get(url())
    assert r.status_code == 200 and "fox" in r.text
    assert "knowledge-upload" not in r.text and "create-collection" not in r.text
    assert "/knowledge/remove" not in r.text and "<progress" not in r.text
    doc = web.client.get(url(tail="/documents/fox"))
    assert doc.status_code == 200 and "Remove this document" not in doc.text


def test_search_shows_the_matching_words_highlighted(web: Web) -> None:
    kb(web).add(
        HELLO,
        "docs",
        actor=ACTOR,
        text="Foxes jump over the lazy dog. Nothing else.",
        doc_id="d1",
        title="Dogs",
    )
    web.login(*USER)
    r = web.client.get(url(), params={"q": "jumping", "collection": "docs"})
    assert r.status_code == 200
    [hit] = rendered(r).context["hits"]
    assert (hit.doc_id, hit.collection, hit.title) == ("d1", "docs", "Dogs")
    assert ("jump", True) in hit.parts
    assert "<mark>jump</mark>" in r.text


def test_a_search_without_words_or_in_an_unknown_collection_shows_the_error(web: Web) -> None:
    web.login(*USER)
    r = web.client.get(url(), params={"q": "!!!"})
    assert r.status_code == 200 and 'id="search-error"' in r.text and "no words" in r.text
    r = web.client.get(url(), params={"q": "fox", "collection": "nope"})
    assert "not found" in rendered(r).context["search_error"]


def test_the_document_list_pages_with_after_links_and_filters_by_collection(web: Web) -> None:
    for n in range(25):
        kb(web).add(HELLO, "docs", actor=ACTOR, text=f"document number {n}", doc_id=f"doc-{n:02d}")
    kb(web).add(HELLO, "other", actor=ACTOR, text="elsewhere", doc_id="zz-other")
    web.login(*USER)
    first = rendered(web.client.get(url(), params={"collection": "docs"})).context
    assert [d["id"] for d in first["documents"]] == [f"doc-{n:02d}" for n in range(20)]
    assert first["next_url"] == url(tail="?collection=docs&after=doc-19")
    second = web.client.get(first["next_url"])
    ctx = rendered(second).context
    assert [d["id"] for d in ctx["documents"]] == [f"doc-{n:02d}" for n in range(20, 25)]
    assert ctx["next_url"] is None and 'id="first-page"' in second.text


def test_one_document_shows_metadata_source_chunks_and_text(web: Web) -> None:
    kb(web).add(HELLO, "docs", actor=ACTOR, text="line one\nline two", doc_id="d1", metadata={"k": "v"})
    web.login(*USER)
    r = web.client.get(url(tail="/documents/d1"))
    assert r.status_code == 200
    assert '<pre id="document-text">line one\nline two</pre>' in r.text
    assert "&#34;k&#34;: &#34;v&#34;" in r.text or "&quot;k&quot;: &quot;v&quot;" in r.text
    assert web.client.get(url(tail="/documents/missing")).status_code == 404


def test_an_admin_uploads_txt_and_md_as_a_plain_form_and_is_redirected(web: Web) -> None:
    csrf = web.login(*ADMIN)
    r = upload(
        web, csrf, [("a.txt", b"alpha text"), ("b.md", b"# Bee\n\nbeta text")], metadata='{"tag": "x"}'
    )
    assert r.status_code == 303 and r.headers["location"] == url(tail="?done=uploaded")
    page = web.client.get(r.headers["location"])
    assert "Upload finished." in page.text
    titles = {d["title"]: d for d in rendered(page).context["documents"]}
    assert set(titles) == {"a.txt", "Bee"} and titles["Bee"]["metadata"] == {
        "tag": "x"
    }  # a heading titles a .md


def test_a_broken_pdf_is_refused_naming_the_file_while_the_others_are_added(web: Web) -> None:
    csrf = web.login(*ADMIN)
    broken = pdf("hello")[:40]
    r = upload(web, csrf, [("good.txt", b"good text"), ("broken.pdf", broken)])
    assert r.status_code == 422
    results = {x.file: x for x in rendered(r).context["results"]}
    assert results["good.txt"].status == "added"
    assert results["broken.pdf"].error and results["broken.pdf"].error.startswith("broken.pdf")
    assert "broken.pdf" in r.text and 'role="alert"' in r.text


def test_the_script_gets_per_file_results_as_json(web: Web) -> None:
    csrf = web.login(*ADMIN)
    parts = [("files", ("a.txt", b"alpha", "text/plain"))]
    headers = {"Accept": "application/json", "X-CSRF-Token": csrf}
    r = web.client.post(url(tail="/upload"), data={"collection": "docs"}, files=parts, headers=headers)
    assert r.status_code == 200
    [one] = r.json()["results"]
    assert one["file"] == "a.txt" and one["status"] == "added"
    again = web.client.post(url(tail="/upload"), data={"collection": "docs"}, files=parts, headers=headers)
    assert again.json()["results"][0]["status"] == "unchanged"


def test_bad_metadata_or_no_files_is_shown_as_an_error(web: Web) -> None:
    csrf = web.login(*ADMIN)
    r = upload(web, csrf, [("a.txt", b"alpha")], metadata="{not json")
    assert r.status_code == 422 and "metadata" in rendered(r).context["error"]
    r = upload(web, csrf, [])
    assert r.status_code == 422 and "choose one or more files" in r.text


def test_an_admin_removes_a_document_and_creates_and_removes_a_collection(web: Web) -> None:
    kb(web).add(HELLO, "docs", actor=ACTOR, text="bye", doc_id="d1")
    csrf = web.login(*ADMIN)
    r = web.client.post(url(tail="/remove"), data={"id": "d1", "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303 and kb(web).get(HELLO, "d1") is None
    r = web.client.post(url(tail="/remove"), data={"id": "d1", "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 409 and "not found" in r.text
    data = {"name": "de", "language": "german", "csrf_token": csrf}
    r = web.client.post(url(tail="/collections"), data=data, follow_redirects=False)
    assert r.status_code == 303 and kb(web).collection(HELLO, "de")["language"] == "german"
    bad = web.client.post(url(tail="/collections"), data={**data, "name": "../x"}, follow_redirects=False)
    assert bad.status_code == 400 and "invalid collection name" in bad.text
    r = web.client.post(
        url(tail="/collections/remove"), data={"name": "de", "csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303 and "Collection removed." in web.client.get(r.headers["location"]).text


@pytest.mark.parametrize(
    ("tail", "data"),
    [
        ("/remove", {"id": "d1"}),
        ("/collections", {"name": "x"}),
        ("/collections/remove", {"name": "docs"}),
    ],
)
def test_a_member_post_is_forbidden(web: Web, tail: str, data: dict[str, str]) -> None:
    kb(web).add(HELLO, "docs", actor=ACTOR, text="stay", doc_id="d1")
    csrf = web.login(*USER)
    r = web.client.post(url(tail=tail), data={**data, "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 403
    assert kb(web).get(HELLO, "d1") is not None


def test_a_member_upload_is_forbidden(web: Web) -> None:
    csrf = web.login(*USER)
    assert upload(web, csrf, [("a.txt", b"alpha")]).status_code == 403
    assert kb(web).collections(HELLO) == []


def test_a_post_without_the_csrf_token_is_forbidden(web: Web) -> None:
    kb(web).add(HELLO, "docs", actor=ACTOR, text="stay", doc_id="d1")
    web.login(*ADMIN)
    # A multipart body without the token is parsed by the login check before it refuses it, and
    # its spooled file is left for the garbage collector (see the report): the header says it.
    parts = [("files", ("a.txt", b"alpha", "text/plain"))]
    r = web.client.post(
        url(tail="/upload"), data={"collection": "docs"}, files=parts, headers={"X-CSRF-Token": "wrong"}
    )
    assert r.status_code == 403
    assert [d["id"] for d in kb(web).documents(HELLO)["documents"]] == ["d1"]
    r = web.client.post(url(tail="/remove"), data={"id": "d1"}, follow_redirects=False)
    assert r.status_code == 403 and kb(web).get(HELLO, "d1") is not None


def test_the_project_page_links_the_knowledge_base(web: Web) -> None:
    web.login(*USER)
    assert f'href="/projects/{HELLO}/knowledge"' in web.client.get(f"/projects/{HELLO}").text
