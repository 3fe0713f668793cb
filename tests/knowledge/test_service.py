"""The knowledge service on a real database, SQLite and PostgreSQL: documents in, ranked
chunks out, the same on both; nothing half written; caps, bad input and audit."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from tests.knowledge.conftest import ADMIN, audit_events
from tests.knowledge.files import docx, pdf
from webui.audit.log import AuditLog
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound
from webui.knowledge.model import Limits
from webui.knowledge.service import KnowledgeService, NewDocument

pytestmark = pytest.mark.dialects


def ids(found: dict[str, Any]) -> list[str]:
    return [hit["documentId"] for hit in found["hits"]]


def counts(engine: Engine) -> tuple[int, int, int, int]:
    with Session(engine) as s:
        conn = s.connection()
        return tuple(  # type: ignore[return-value]
            int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
            for t in ("knowledge_documents", "knowledge_chunks", "knowledge_meta", "knowledge_fts")
        )


def test_a_document_is_chunked_indexed_and_found_with_its_snippet(kb: KnowledgeService) -> None:
    body = "Intro paragraph about nothing much.\n\n" + "Filler sentence here. " * 80 + "The zebra crossed."
    added = kb.add("p", "docs", actor=ADMIN, text=body, title="Zebras", metadata={"kind": "guide"})
    assert added["status"] == "added" and added["chunks"] >= 2 and added["collection"] == "docs"
    found = kb.search("p", "zebras crossing")
    [hit] = found["hits"]
    assert found["mode"] == "text"
    assert (
        hit["documentId"] == added["id"] and hit["title"] == "Zebras" and hit["metadata"] == {"kind": "guide"}
    )
    assert hit["chunk"]["position"] == added["chunks"] - 1
    assert body[hit["chunk"]["start"] : hit["chunk"]["end"]].endswith("The zebra crossed.")
    assert [hit["snippet"][a:b] for a, b in hit["highlights"]] == ["zebra", "crossed"]
    got = kb.get("p", added["id"])
    assert got is not None and got["text"] == body


def test_the_same_text_again_changes_nothing_and_a_new_text_replaces_every_chunk(
    kb: KnowledgeService, engine: Engine
) -> None:
    first = kb.add("p", "docs", actor=ADMIN, text="alpha beta " * 300)
    again = kb.add("p", "docs", actor=ADMIN, text="alpha beta " * 300)
    assert again["status"] == "unchanged" and again["id"] == first["id"]
    assert kb.add("p", "docs", actor=ADMIN, text="one", doc_id="fixed")["status"] == "added"
    before = counts(engine)
    replaced = kb.add("p", "docs", actor=ADMIN, text="two words", doc_id="fixed")
    assert replaced["status"] == "replaced"
    assert counts(engine) == before
    assert ids(kb.search("p", "one")) == [] and ids(kb.search("p", "words")) == ["fixed"]
    updated = kb.add("p", "docs", actor=ADMIN, text="two words", doc_id="fixed", metadata={"a": 1})
    assert updated["status"] == "updated"
    assert ids(kb.search("p", "words", filter={"a": 1})) == ["fixed"]


def test_ranking_is_the_same_on_both_databases(kb: KnowledgeService) -> None:
    """More occurrences in a text of the same length rank higher, on BM25 and cover density."""
    filler = "lorem ipsum dolor sit amet consectetur"
    for n in (1, 3, 5, 2, 4):
        kb.add("p", "docs", actor=ADMIN, doc_id=f"n{n}", text=" ".join(["falcon"] * n + [filler] * (8 - n)))
    kb.add("p", "docs", actor=ADMIN, doc_id="none", text=filler * 3)
    assert ids(kb.search("p", "falcon")) == ["n5", "n4", "n3", "n2", "n1"]
    assert ids(kb.search("p", "falcon", limit=2)) == ["n5", "n4"]
    assert ids(kb.search("p", '"falcon lorem"')) == ["n5", "n4", "n3", "n2", "n1"]


def test_filters_on_metadata_and_collections(kb: KnowledgeService) -> None:
    kb.add(
        "p", "a", actor=ADMIN, doc_id="d1", text="shared word", metadata={"lang": "en", "tags": ["x", "y"]}
    )
    kb.add(
        "p", "a", actor=ADMIN, doc_id="d2", text="shared word", metadata={"lang": "de", "n": 2, "ok": True}
    )
    kb.add("p", "b", actor=ADMIN, doc_id="d3", text="shared word", metadata={"lang": "en", "n": 2.0})
    sort = sorted
    assert sort(ids(kb.search("p", "shared"))) == ["d1", "d2", "d3"]
    assert sort(ids(kb.search("p", "shared", filter={"lang": "en"}))) == ["d1", "d3"]
    assert ids(kb.search("p", "shared", filter={"tags": "y"})) == ["d1"]
    assert sort(ids(kb.search("p", "shared", filter={"lang": ["de", "en"], "n": 2}))) == ["d2"]
    assert ids(kb.search("p", "shared", filter={"ok": True})) == ["d2"]
    assert ids(kb.search("p", "shared", filter={"ok": "true"})) == []
    assert ids(kb.search("p", "shared", collection="b")) == ["d3"]
    assert sort(ids(kb.search("p", "shared", collection=["a", "b"], filter={"lang": "en"}))) == ["d1", "d3"]
    assert [d["id"] for d in kb.documents("p", filter={"lang": "en"})["documents"]] == ["d1", "d3"]
    with pytest.raises(NotFound, match="collection 'c' not found"):
        kb.search("p", "shared", collection="c")


def test_another_project_is_never_searched_listed_or_read(kb: KnowledgeService) -> None:
    kb.add("mine", "docs", actor=ADMIN, doc_id="secret", text="launch codes")
    assert ids(kb.search("theirs", "launch")) == []
    assert kb.get("theirs", "secret") is None
    assert kb.documents("theirs")["documents"] == [] and kb.collections("theirs") == []
    assert kb.remove("theirs", "secret", actor=ADMIN) is False
    assert kb.get("mine", "secret") is not None


@pytest.mark.parametrize(
    "query",
    ['"', "'", "AND", "NOT x", "a OR b", "NEAR(a b)", "col:term", "*", "^start", "a -b", "(a", "a)",
     "'; DROP TABLE knowledge_chunks; --", "\\", "&|!<->", "x:*", "\x00a", "a" * 300],
)  # fmt: skip
def test_queries_with_engine_syntax_never_raise_an_engine_error(kb: KnowledgeService, query: str) -> None:
    kb.add("p", "docs", actor=ADMIN, text="and or not near col term start drop table knowledge chunks x a b")
    try:
        found = kb.search("p", query)
    except KnowledgeRefused as exc:
        assert "no words" in exc.message
    else:
        assert isinstance(found["hits"], list)
    assert kb.search("p", "drop table")["hits"]


def test_languages_stem_for_their_words(kb: KnowledgeService) -> None:
    kb.create_collection("p", "de", language="german", actor=ADMIN)
    kb.create_collection("p", "raw", language="none", actor=ADMIN)
    kb.add("p", "de", actor=ADMIN, doc_id="haus", text="Die Häuser stehen am Fluss")
    kb.add("p", "raw", actor=ADMIN, doc_id="raw", text="running dogs")
    assert ids(kb.search("p", "Haus")) == ["haus"]
    assert ids(kb.search("p", "running")) == ["raw"] and ids(kb.search("p", "run")) == []
    with pytest.raises(KnowledgeRefused, match="exists with language 'german'"):
        kb.create_collection("p", "de", language="english", actor=ADMIN)
    assert kb.create_collection("p", "de", actor=ADMIN)["created"] is False
    with pytest.raises(KnowledgeRefused, match="unknown language"):
        kb.create_collection("p", "x", language="klingon", actor=ADMIN)


def test_files_of_each_kind_are_read_and_bad_ones_refused_by_name(kb: KnowledgeService) -> None:
    html = b"<html><head><title>Page T</title><script>var hidden = 1</script></head>"
    html += b"<body><p>visible owl</p></body>"
    kinds = {
        "a.txt": b"plain owl",
        "b.md": b"# Heading\n\nmarkdown owl",
        "c.html": html,
        "d.pdf": pdf("portable owl", "second page"),
        "e.docx": docx("word owl", "more"),
    }
    for name, data in kinds.items():
        added = kb.add("p", "files", actor=ADMIN, file_name=name, data=data)
        assert added["source"] == name
    assert len(kb.search("p", "owl")["hits"]) == 5
    assert kb.search("p", "hidden")["hits"] == []
    [page] = [d for d in kb.documents("p")["documents"] if d["source"] == "c.html"]
    assert page["title"] == "Page T"
    for name, data, why in [
        ("broken.pdf", b"%PDF-1.4 not really", "broken.pdf: not a readable PDF"),
        ("empty.pdf", pdf(""), "empty.pdf: the PDF has no text"),
        ("bad.docx", b"PK\x03\x04 nope", "bad.docx: not a readable .docx"),
        ("latin.txt", "café".encode("latin-1"), "latin.txt: not UTF-8"),
        ("tool.exe", b"MZ", "tool.exe: cannot add a file of this kind"),
        ("blank.txt", b"   \n", "blank.txt: has no text"),
    ]:
        with pytest.raises(KnowledgeRefused, match=why):
            kb.add("p", "files", actor=ADMIN, file_name=name, data=data)
    assert kb.collection("p", "files")["documents"] == 5


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        ([1, 2], "must be a JSON object"),
        ({"a": {"b": {"c": {"d": 1}}}}, "nested deeper than 4"),
        ({"k": "x" * 9000}, "larger than 8192 bytes"),
        ({f"k{i}": i for i in range(65)}, "more than 64 keys"),
        ({"": 1}, "keys must be strings of 1-64"),
        ({"n": math.nan}, "finite"),
    ],
)
def test_bad_metadata_is_refused_and_nothing_is_written(
    kb: KnowledgeService, engine: Engine, meta: Any, why: str
) -> None:
    with pytest.raises(KnowledgeRefused, match=why):
        kb.add("p", "docs", actor=ADMIN, text="words", metadata=meta)
    assert counts(engine) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("filter_", "why"),
    [("lang", "a filter is a JSON object"), ({"k": {"$gt": 1}}, "values must be"), ({"k": []}, "give 1-32")],
)
def test_bad_filters_are_refused(kb: KnowledgeService, filter_: Any, why: str) -> None:
    with pytest.raises(KnowledgeRefused, match=why):
        kb.search("p", "x", filter=filter_)


def test_bad_names_and_ids_are_refused(kb: KnowledgeService) -> None:
    for name in ["", "../x", "a b", "x" * 65, "-lead"]:
        with pytest.raises(KnowledgeRefused, match="invalid collection name"):
            kb.add("p", name, actor=ADMIN, text="t")
    with pytest.raises(KnowledgeRefused, match="invalid document id"):
        kb.add("p", "docs", actor=ADMIN, text="t", doc_id="a/b")
    with pytest.raises(KnowledgeRefused, match="not both"):
        kb.add("p", "docs", actor=ADMIN, text="t", file_name="a.txt", data=b"t")
    kb.add("p", "one", actor=ADMIN, text="t", doc_id="same")
    with pytest.raises(KnowledgeRefused, match="is in collection 'one'"):
        kb.add("p", "two", actor=ADMIN, text="t", doc_id="same")


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        (Limits(max_documents=2), "at most 2 documents"),
        (Limits(max_bytes=25), "at most 25 bytes"),
        (Limits(max_chunks=2), "at most 2 chunks"),
    ],
)
def test_a_write_past_a_cap_is_refused_whole(engine: Engine, limits: Limits, why: str) -> None:
    kb = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=limits)
    kb.add("p", "docs", actor=ADMIN, text="first text", doc_id="a")
    kb.add("p", "docs", actor=ADMIN, text="second one", doc_id="b")
    before = counts(engine)
    with pytest.raises(KnowledgeFull, match=why) as caught:
        kb.add("p", "docs", actor=ADMIN, text="third text", doc_id="c")
    assert caught.value.status == 409
    assert counts(engine) == before
    kb.add("other", "docs", actor=ADMIN, text="apart", doc_id="c")
    assert kb.remove("p", "a", actor=ADMIN)
    kb.add("p", "docs", actor=ADMIN, text="third text", doc_id="c")


def test_the_collections_cap(engine: Engine) -> None:
    kb = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits(max_collections=1))
    kb.add("p", "one", actor=ADMIN, text="t")
    with pytest.raises(KnowledgeFull, match="holds 1 collections"):
        kb.add("p", "two", actor=ADMIN, text="t")


def test_a_document_too_large_is_refused(engine: Engine) -> None:
    kb = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits(max_document_bytes=10))
    with pytest.raises(KnowledgeRefused, match="larger than 10 bytes"):
        kb.add("p", "docs", actor=ADMIN, text="x" * 11)
    kb2 = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits(max_file_bytes=10))
    with pytest.raises(KnowledgeRefused, match=r"big\.txt: larger than 10 bytes"):
        kb2.add("p", "docs", actor=ADMIN, file_name="big.txt", data=b"x" * 11)


def test_removing_a_collection_removes_its_documents_and_index_rows(
    kb: KnowledgeService, engine: Engine
) -> None:
    kb.add("p", "gone", actor=ADMIN, text="temporary " * 500)
    kb.add("p", "kept", actor=ADMIN, text="permanent", doc_id="k")
    assert kb.remove_collection("p", "gone", actor=ADMIN) == {"name": "gone", "removedDocuments": 1}
    assert counts(engine)[0] == 1 and counts(engine)[1] == counts(engine)[3] == 1
    assert ids(kb.search("p", "temporary")) == [] and ids(kb.search("p", "permanent")) == ["k"]
    with pytest.raises(NotFound):
        kb.remove_collection("p", "gone", actor=ADMIN)


def test_export_then_import_recreates_the_knowledge_base(kb: KnowledgeService) -> None:
    kb.create_collection("src", "de", language="german", actor=ADMIN)
    kb.add("src", "de", actor=ADMIN, doc_id="h", text="Häuser", metadata={"a": [1, 2]})
    kb.add("src", "en", actor=ADMIN, text="big text " * 400, title="Big")
    lines = list(kb.export("src"))
    assert [line["type"] for line in lines] == ["collection", "document", "collection", "document"]
    assert kb.import_lines("dst", lines, actor=ADMIN) == {
        "collections": 2, "added": 2, "replaced": 0, "updated": 0, "unchanged": 0,
    }  # fmt: skip
    assert list(kb.export("dst")) == lines
    assert kb.import_lines("dst", lines, actor=ADMIN)["unchanged"] == 2
    with pytest.raises(KnowledgeRefused, match='line 2: a document needs its "text"'):
        kb.import_lines("dst", [lines[0], {"type": "document", "collection": "de"}], actor=ADMIN)
    with pytest.raises(KnowledgeRefused, match="line 1: expected an object"):
        kb.import_lines("dst", ["nope"], actor=ADMIN)


def test_writes_are_audited_with_the_project_and_the_document(kb: KnowledgeService, engine: Engine) -> None:
    kb.add("p", "docs", actor=ADMIN, text="one", doc_id="d")
    kb.add("p", "docs", actor=ADMIN, text="one", doc_id="d")  # unchanged: no event
    kb.add("p", "docs", actor=ADMIN, text="two", doc_id="d")
    kb.add("p", "docs", actor=ADMIN, text="two", doc_id="d", title="T")
    kb.remove("p", "d", actor=ADMIN)
    kb.remove_collection("p", "docs", actor=ADMIN)
    assert audit_events(engine) == [
        ("knowledge.collection.created", "p", "docs"),
        ("knowledge.document.added", "p", "d"),
        ("knowledge.document.replaced", "p", "d"),
        ("knowledge.document.updated", "p", "d"),
        ("knowledge.document.removed", "p", "d"),
        ("knowledge.collection.removed", "p", "docs"),
    ]


def test_documents_are_listed_a_page_at_a_time(kb: KnowledgeService) -> None:
    for i in range(7):
        kb.add("p", "docs", actor=ADMIN, doc_id=f"d{i}", text=f"text {i}")
    first = kb.documents("p", limit=3)
    assert [d["id"] for d in first["documents"]] == ["d0", "d1", "d2"] and first["next"] == "d2"
    rest = kb.documents("p", after=first["next"], limit=10)
    assert [d["id"] for d in rest["documents"]] == ["d3", "d4", "d5", "d6"] and rest["next"] is None
    with pytest.raises(KnowledgeRefused, match="limit must be an integer from 1 to 200"):
        kb.documents("p", limit=201)


def test_several_documents_are_written_together_or_not_at_all(kb: KnowledgeService, engine: Engine) -> None:
    items = [NewDocument("docs", text=f"text {i}", doc_id=f"d{i}") for i in range(5)]
    items.insert(3, NewDocument("docs", text="bad", metadata="not an object"))
    with pytest.raises(KnowledgeRefused, match="document 4: metadata must be a JSON object"):
        kb.add_many("p", items, actor=ADMIN)
    assert counts(engine) == (0, 0, 0, 0)
    del items[3]
    items.append(NewDocument("docs", text="replaced again", doc_id="d0"))
    assert [d["status"] for d in kb.add_many("p", items, actor=ADMIN)] == ["added"] * 5 + ["replaced"]
    assert kb.collection("p", "docs")["documents"] == 5
    assert ids(kb.search("p", "replaced")) == ["d0"]


def test_an_import_keeps_the_lines_before_a_bad_one(kb: KnowledgeService) -> None:
    lines: list[Any] = [
        {"type": "document", "collection": "c", "id": f"d{i}", "text": f"t {i}"} for i in range(150)
    ]
    with pytest.raises(KnowledgeRefused, match='line 151: a document needs its "text"'):
        kb.import_lines("p", [*lines, {"type": "document", "collection": "c"}], actor=ADMIN)
    assert kb.collection("p", "c")["documents"] == 150
    bad_meta = {"type": "document", "collection": "c", "id": "x", "text": "t", "metadata": [1]}
    with pytest.raises(KnowledgeRefused, match="line 121: metadata must be a JSON object"):
        kb.import_lines("p", [*lines[:120], bad_meta, *lines[120:]], actor=ADMIN)
    assert kb.collection("p", "c")["documents"] == 150


def test_concurrent_writers_are_held_to_the_cap_and_the_counts_stay_true(engine: Engine) -> None:
    kb = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits(max_documents=3))
    outcomes: list[str] = []
    gate = threading.Barrier(8)

    def write(i: int) -> None:
        gate.wait(timeout=30)
        try:
            kb.add("p", "docs", actor=ADMIN, doc_id=f"d{i}", text=f"text number {i}")
            outcomes.append("added")
        except KnowledgeFull:
            outcomes.append("full")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["added"] * 3 + ["full"] * 5
    assert counts(engine)[0] == 3 and kb.collection("p", "docs")["documents"] == 3


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ({"type": "collection"}, "invalid collection name None"),
        ({"type": "collection", "name": "ok", "language": 3}, "the language must be a string"),
        ({"type": "document", "text": "t"}, "invalid collection name None"),
        ({"type": "document", "collection": ["c"], "text": "t"}, "invalid collection name"),
    ],
)
def test_an_import_line_without_its_names_is_refused_not_guessed(
    kb: KnowledgeService, line: Any, why: str
) -> None:
    with pytest.raises(KnowledgeRefused, match=f"line 1: {why}"):
        kb.import_lines("p", [line], actor=ADMIN)
    assert kb.collections("p") == []


def test_a_word_in_more_chunks_than_are_ranked_is_ranked_among_the_newest_and_says_so(
    kb: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webui.knowledge.search.RANKED_CANDIDATES", 3)
    kb.add("p", "docs", actor=ADMIN, doc_id="old-best", text="common common common rare")
    for i in range(5):
        kb.add("p", "docs", actor=ADMIN, doc_id=f"new{i}", text=f"common filler words number {i}")
    kb.add("other", "docs", actor=ADMIN, doc_id="theirs", text="common " * 50)  # another project: not counted
    found = kb.search("p", "common")
    assert found["approximate"] is True
    assert sorted(ids(found)) == ["new2", "new3", "new4"]  # the newest three, ranked
    exact = kb.search("p", "common rare")
    assert exact["approximate"] is False and ids(exact) == ["old-best"]
    assert kb.search("p", "common", filter={"none": 1}) == {"mode": "text", "approximate": False, "hits": []}


def test_a_text_or_query_naming_another_projects_scope_token_reaches_nothing(kb: KnowledgeService) -> None:
    from webui.store.knowledge import scope_terms

    kb.add("mine", "docs", actor=ADMIN, doc_id="mine", text="ordinary words")
    planted = scope_terms("mine", 1, [])  # what SQLite's index holds as the scope of "mine"
    kb.add("theirs", "docs", actor=ADMIN, doc_id="theirs", text=f"ordinary words {planted}")
    assert ids(kb.search("mine", "ordinary")) == ["mine"]
    assert ids(kb.search("theirs", "ordinary")) == ["theirs"]
    assert ids(kb.search("mine", planted)) == []


def test_an_import_keeps_each_documents_source_and_a_markdown_heading_is_its_title(
    kb: KnowledgeService,
) -> None:
    kb.add("src", "files", actor=ADMIN, file_name="notes.md", data=b"# Bees\n\nThey dance.")
    [doc] = kb.documents("src")["documents"]
    assert doc["title"] == "Bees" and doc["source"] == "notes.md"
    kb.import_lines("dst", list(kb.export("src")), actor=ADMIN)
    [copy] = kb.documents("dst")["documents"]
    assert (copy["title"], copy["source"], copy["id"]) == ("Bees", "notes.md", doc["id"])


def test_a_docx_packed_another_way_than_word_packs_it_is_refused_naming_it(kb: KnowledgeService) -> None:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_LZMA) as archive:
        archive.writestr("word/document.xml", "<w:p><w:t>text</w:t></w:p>")
    with pytest.raises(KnowledgeRefused, match=r"odd\.docx: the document is encrypted or packed in a way"):
        kb.add("p", "files", actor=ADMIN, file_name="odd.docx", data=out.getvalue())
