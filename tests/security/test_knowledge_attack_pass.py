"""A second attack pass on the knowledge base: hostile .docx parts that made extraction cost
time quadratic in their size (holding the GIL, so the whole server stalled), words the FTS5
tokenizer splits differently from the stemmer (can a fragment reach another project?), and
concurrent writers of the same document id (do the counters stay true?)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.errors import KnowledgeRefused
from webui.knowledge.model import Actor
from webui.knowledge.service import KnowledgeService

ADMIN = Actor("admin", "cli")

# A few hundred bytes zipped; before the fix each took minutes of regex time (GIL held).
HOSTILE_PARTS = {
    "unclosed paragraphs": 'b"<w:p " * 200_000',
    "unclosed text runs": 'b"<w:p>" + b"<w:t " * 200_000 + b"</w:p>"',
    "unclosed breaks": 'b"<w:p>" + b"<w:br " * 200_000 + b"</w:p>"',
}
EXTRACT = """
import io, sys, zipfile
from webui.errors import KnowledgeRefused
from webui.knowledge.extract import extract
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("word/document.xml", {xml})
try:
    extract("hostile.docx", buf.getvalue())
except KnowledgeRefused as exc:
    print(exc.message)
"""


@pytest.mark.parametrize("xml", list(HOSTILE_PARTS.values()), ids=list(HOSTILE_PARTS))
def test_a_docx_of_unclosed_tags_is_extracted_in_linear_time(xml: str) -> None:
    """`re` holds the GIL: a lazy `.*?` scan to the end from each of 200k openings froze every
    request of the server for minutes. Run apart, so the old code fails by timing out."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", EXTRACT.format(xml=xml)], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("extracting a 1 MB .docx part took more than 30 s")
    assert done.returncode == 0, done.stderr
    assert "has no text" in done.stdout


def test_a_docx_still_reads_its_paragraphs_runs_tabs_and_breaks() -> None:
    import io
    import zipfile

    from webui.knowledge.extract import extract

    xml = (
        b'<w:document><w:body><w:p w:rsid="1"><w:pPr/><w:r><w:t xml:space="preserve">one &amp; </w:t>'
        b"</w:r><w:r><w:tab/><w:t>two</w:t><w:br/><w:t>three</w:t></w:r></w:p><w:p/>"
        b"<w:p><w:t>four</w:t></w:p><w:p ><w:t>unclosed</w:t></w:body></w:document>"
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", xml)
    assert extract("a.docx", buf.getvalue()) == ("one & \ttwo\nthree\n\nfour", None)


PDF = """
import io, sys, zlib
from webui.errors import KnowledgeRefused
from webui.knowledge import extract as ex

def build(pages, reps):
    content = zlib.compress(b"BT /F1 12 Tf 10 10 Td (a) Tj ET\\n" * reps)
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    objs.append(b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages)
    head = b"<< /Length %d /Filter /FlateDecode >>\\nstream\\n" % len(content)
    objs.append(head + content + b"\\nendstream")
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 99 99] /Contents 3 0 R"
    objs += [page + b" /Resources << /Font << /F1 4 0 R >> >> >>"] * pages
    out = io.BytesIO()
    out.write(b"%PDF-1.4\\n")
    offsets = []
    for n, o in enumerate(objs, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\\n" % n + o + b"\\nendobj\\n")
    xref = out.tell()
    out.write(b"xref\\n0 %d\\n0000000000 65535 f \\n" % (len(objs) + 1))
    for o in offsets:
        out.write(b"%010d 00000 n \\n" % o)
    out.write(b"trailer\\n<< /Size %d /Root 1 0 R >>\\nstartxref\\n%d\\n%%%%EOF\\n" % (len(objs) + 1, xref))
    return out.getvalue()

data = build({pages}, {reps})
assert len(data) < 100_000
try:
    ex.extract("bomb.pdf", data, pdf_seconds=2.0)
except KnowledgeRefused as exc:
    print(exc.message)
"""


@pytest.mark.parametrize(
    ("pages", "reps", "says"),
    [(100, 20_000, "takes too long"), (1, 800_000, "too large to read")],
    ids=["pages sharing one large stream", "one page of a huge stream"],
)
def test_a_small_pdf_whose_pages_cost_minutes_to_parse_is_refused_in_bounded_time(
    pages: int, reps: int, says: str
) -> None:
    """A few KB of PDF: pages sharing one zipped stream of 600 KB of text operators (pypdf
    parses ~0.3 MB/s in Python: 2000 such pages held a worker ~45 min), or one page of 26 MB."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", PDF.format(pages=pages, reps=reps)],
            capture_output=True,
            text=True,
            timeout=40,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading a small PDF took more than 40 s")
    assert done.returncode == 0, done.stderr
    assert says in done.stdout, done.stdout


# Letters Python's `\w` holds but FTS5's unicode61 (Unicode 6.1, categories L* N* Co) splits
# on: U+0307 (a mark, from lower-casing "İ"), U+08A1 (a letter of Unicode 7.0). A stem holding
# one is indexed as the prefixed token before it and an unprefixed fragment after it.
SPLIT_WORDS = ["İstanbulsecret", "\u08a1leakword", "ab\u08a1cdhidden"]


def test_words_fts5_splits_never_reach_another_projects_chunks(kb: KnowledgeService) -> None:
    for word in SPLIT_WORDS:
        kb.add("victim", "docs", actor=ADMIN, text=f"classified {word} material")
    kb.add("attacker", "docs", actor=ADMIN, text="İzmir \u08a1 ab\u08a1 unrelated")
    for query in [*SPLIT_WORDS, "stanbulsecret", "leakword", "cdhidden", "İ", "\u08a1", '"İ stanbulsecret"']:
        try:
            found = kb.search("attacker", query)
        except KnowledgeRefused:
            continue
        assert all(h["documentId"] for h in found["hits"])  # a hit is the attacker's own only
        texts = [h["snippet"] for h in found["hits"]]
        assert not any("classified" in t for t in texts), (query, texts)
    assert kb.search("victim", "stanbulsecret")["hits"] == [] or all(
        "classified" in h["snippet"] for h in kb.search("victim", "stanbulsecret")["hits"]
    )


def test_another_projects_collection_name_filter_and_export_see_nothing(kb: KnowledgeService) -> None:
    kb.add("victim", "secret", actor=ADMIN, text="payroll figures", metadata={"tag": "x"})
    kb.add("attacker", "mine", actor=ADMIN, text="payroll figures", metadata={"tag": "x"})
    with pytest.raises(Exception, match="not found"):
        kb.search("attacker", "payroll", collection="secret")
    found = kb.search("attacker", "payroll", filter={"tag": "x"})
    assert [h["collection"] for h in found["hits"]] == ["mine"]
    listing = kb.documents("attacker", filter={"tag": "x"}, after="", limit=200)
    assert [d["collection"] for d in listing["documents"]] == ["mine"]
    assert {line.get("collection", line.get("name")) for line in kb.export("attacker")} == {"mine"}


def test_concurrent_adds_and_removes_of_one_id_keep_the_counters_true(
    kb: KnowledgeService, engine: Engine
) -> None:
    kb.create_collection("p", "docs", actor=ADMIN)
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def writer(n: int) -> None:
        try:
            start.wait(timeout=30)
            for i in range(15):
                if (i + n) % 3 == 0:
                    kb.remove("p", "same", actor=ADMIN)
                else:
                    kb.add("p", "docs", actor=ADMIN, doc_id="same", text=f"text {n} {i} " * (50 * (n + 1)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "writers still running after 120 s"
    assert errors == []
    with Session(engine) as s:
        conn = s.connection()
        docs, chunks, size = conn.execute(
            text("SELECT documents, chunks, size FROM knowledge_collections WHERE name = 'docs'")
        ).one()
        real = conn.execute(
            text("SELECT count(*), coalesce(sum(chunks), 0), coalesce(sum(size), 0) FROM knowledge_documents")
        ).one()
        stored_chunks = conn.execute(text("SELECT count(*) FROM knowledge_chunks")).scalar_one()
        indexed = conn.execute(text("SELECT count(*) FROM knowledge_fts")).scalar_one()
    assert (docs, chunks, size) == tuple(real)
    assert stored_chunks == indexed == real[1]


def test_an_import_of_repeated_collection_lines_takes_few_write_transactions(
    kb: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import body is as large as a file (32 MiB): a million 33-byte collection lines, each
    its own write transaction (~1 ms, the SQLite write lock held), between documents that
    each forced a flush, kept every writer of the store waiting ~15 minutes."""
    from webui.store import knowledge as ks

    writes = 0
    begin = ks.begin_write

    def counted(s: Session, project_id: str) -> None:
        nonlocal writes
        writes += 1
        begin(s, project_id)

    monkeypatch.setattr(ks, "begin_write", counted)
    lines: list[dict[str, object]] = []
    for i in range(300):
        lines.append({"type": "collection", "name": "docs", "language": "english"})
        lines.append({"type": "document", "collection": "docs", "id": f"d{i % 7}", "text": f"word {i % 7}"})
    counts = kb.import_lines("p", lines, actor=ADMIN)
    assert counts["collections"] == 1 and counts["added"] == 7
    assert writes <= 10, writes
    with pytest.raises(KnowledgeRefused, match="line 2"):  # a new, bad line is still refused
        kb.import_lines("p", [lines[0], {"type": "collection", "name": "../x"}], actor=ADMIN)


HTML = """
from webui.errors import KnowledgeRefused
from webui.knowledge.extract import extract
try:
    extract("hostile.html", ({source}).encode())
except KnowledgeRefused as exc:
    print(exc.message)
"""


@pytest.mark.parametrize("source", ['"<a " * 8000', "'<a b=\">\"' * 8000"], ids=["unclosed", "quoted gt"])
def test_a_small_html_file_of_unclosed_start_tags_is_read_in_bounded_time(source: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", HTML.format(source=source)], capture_output=True, text=True, timeout=5
        )
    except subprocess.TimeoutExpired:
        pytest.fail("extracting a 24 KB .html file took more than 5 s")
    assert done.returncode == 0, done.stderr
