"""Hostile knowledge-base content on the knowledge page: document text, titles, metadata and
file names reach the HTML escaped (never as elements, attributes, htmx attributes or
template expressions); another project's document id through this project's URL is 404; an
upload over the size cap is refused before it is indexed."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ADMIN, HELLO, INTERACTIVE, Web, prepare, running
from webui.knowledge.model import Actor
from webui.web.state import app_state

ACTOR = Actor(actor="test", source="cli")
HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "{{7*7}}",
    '<div hx-get="/api/evil" hx-trigger="load">x</div>',
    "' hx-post='/evil",
]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Web]:
    """The page tests' app on its own copy of the prepared data dir."""
    with running(prepare(tmp_path / "data")) as own:
        yield own


def kb(web: Web) -> Any:
    return app_state(web.client.app).services.knowledge


def assert_inert(html: str) -> None:
    assert "<script>alert" not in html
    assert "<img src=x" not in html and "onerror=alert(1)>" not in html
    assert 'hx-get="/api/evil"' not in html and "hx-post='/evil" not in html
    assert "<div hx-get" not in html


@pytest.mark.parametrize("evil", HOSTILE)
def test_hostile_text_title_and_metadata_are_shown_escaped(app: Web, evil: str) -> None:
    web = app
    kb(web).add(
        HELLO,
        "docs",
        actor=ACTOR,
        text=f"marker words {evil} marker",
        doc_id="evil",
        title=evil,
        metadata={evil: evil},
    )
    web.login(*ADMIN)
    listing = web.client.get(f"/projects/{HELLO}/knowledge")
    search = web.client.get(f"/projects/{HELLO}/knowledge", params={"q": "marker"})
    doc = web.client.get(f"/projects/{HELLO}/knowledge/documents/evil")
    for r in (listing, search, doc):
        assert r.status_code == 200
        assert_inert(r.text)
    assert "<mark>marker</mark>" in search.text
    if evil == "{{7*7}}":  # shown as typed, never evaluated
        assert (
            "{{7*7}}" in doc.text and '<pre id="document-text">marker words {{7*7}} marker</pre>' in doc.text
        )


@pytest.mark.parametrize("evil", HOSTILE)
def test_a_hostile_file_name_is_shown_escaped_in_the_results_and_the_list(app: Web, evil: str) -> None:
    web = app
    csrf = web.login(*ADMIN)
    name = evil.replace("/", "_") + ".txt"
    files = [
        ("files", (name, b"harmless words", "text/plain")),
        ("files", (evil + ".pdf", b"%PDF-broken", "application/pdf")),
    ]
    r = web.client.post(
        f"/projects/{HELLO}/knowledge/upload",
        data={"collection": "docs", "csrf_token": csrf},
        files=files,
        follow_redirects=False,
    )
    assert r.status_code == 422  # the broken pdf
    assert_inert(r.text)
    assert_inert(web.client.get(f"/projects/{HELLO}/knowledge").text)


def test_another_projects_document_id_through_this_projects_url_is_404(app: Web) -> None:
    web = app
    kb(web).add(INTERACTIVE, "docs", actor=ACTOR, text="other project's secret", doc_id="theirs")
    csrf = web.login(*ADMIN)
    r = web.client.get(f"/projects/{HELLO}/knowledge/documents/theirs")
    assert r.status_code == 404 and "secret" not in r.text
    r = web.client.post(
        f"/projects/{HELLO}/knowledge/remove",
        data={"id": "theirs", "csrf_token": csrf},
        follow_redirects=False,
    )
    assert r.status_code == 409
    assert kb(web).get(INTERACTIVE, "theirs") is not None


def test_an_upload_over_the_cap_is_refused(tmp_path: Path) -> None:
    settings = prepare(tmp_path / "data").model_copy(update={"max_file_bytes": 64 * 1024})
    with running(settings) as capped:
        web = capped
        csrf = web.login(*ADMIN)
        big = b"word " * (40 * 1024)  # 200 KiB: over the file cap, under the body cap
        r = web.client.post(
            f"/projects/{HELLO}/knowledge/upload",
            data={"collection": "docs", "csrf_token": csrf},
            files=[("files", ("big.txt", big, "text/plain"))],
            follow_redirects=False,
        )
        assert r.status_code == 422 and "big.txt: larger than" in r.text
        huge = b"x" * (64 * 1024 + 2 * 1024 * 1024)  # over the whole body cap: the guard refuses it
        r = web.client.post(
            f"/projects/{HELLO}/knowledge/upload",
            data={"collection": "docs", "csrf_token": csrf},
            files=[("files", ("huge.txt", huge, "text/plain"))],
            follow_redirects=False,
        )
        assert r.status_code == 413
        assert kb(web).collections(HELLO) == []


def test_an_upload_refused_for_its_csrf_token_leaves_no_file_open(app: Web) -> None:
    """The form a refused write read is closed at once: an upload large enough to be spooled
    to disk leaves no open file behind (the suite fails on a ResourceWarning)."""
    app.login(*ADMIN)
    big = b"word " * (512 * 1024)  # 2.5 MiB: past the form parser's in-memory spool
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = app.client.post(
            f"/projects/{HELLO}/knowledge/upload",
            data={"collection": "docs", "csrf_token": "wrong"},
            files={"files": ("big.txt", big, "text/plain")},
        )
        gc.collect()
    assert r.status_code == 403, r.text
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
