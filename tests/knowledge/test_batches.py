"""Large knowledge-base work in bounded steps, on SQLite and PostgreSQL: a collection is
removed a batch a transaction (hidden as soon as it is marked, whatever is left of it; a
removal cut short is finished by removing it again or at the next start; audited once),
an export is read a batch a transaction, and the stored vectors count in the byte cap."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from tests.knowledge.conftest import ADMIN, audit_events
from webui.audit.log import AuditLog
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound
from webui.knowledge import export as export_module
from webui.knowledge import removal as removal_module
from webui.knowledge.embeddings import Embedder
from webui.knowledge.model import Limits
from webui.knowledge.service import KnowledgeService

pytestmark = pytest.mark.dialects

DIMENSIONS = 8


def rows(engine: Engine, table: str) -> int:
    with Session(engine) as s:
        return int(s.connection().execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def tables(engine: Engine) -> dict[str, int]:
    names = (
        "knowledge_collections",
        "knowledge_documents",
        "knowledge_chunks",
        "knowledge_meta",
        "knowledge_fts",
    )
    return {name: rows(engine, name) for name in names}


def ids(found: dict[str, Any]) -> list[str]:
    return [hit["documentId"] for hit in found["hits"]]


def fill(kb: KnowledgeService) -> None:
    """`gone`: 5 documents of 1 to 7 chunks, with metadata; `kept`: one."""
    for i in range(5):
        kb.add(
            "p",
            "gone",
            actor=ADMIN,
            doc_id=f"g{i}",
            text="walrus words. " * (80 * (i + 1)),
            metadata={"i": i},
        )
    kb.add("p", "kept", actor=ADMIN, doc_id="k", text="walrus kept here", metadata={"i": 0})


def test_a_collection_is_removed_a_bounded_batch_a_transaction(
    kb: KnowledgeService, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removal_module, "REMOVE_CHUNKS", 3)
    fill(kb)
    before = tables(engine)
    collection_id, documents = kb.removals.begin_removal("p", "gone", actor=ADMIN)
    assert documents == 5
    steps = 0
    while True:
        chunks = rows(engine, "knowledge_chunks")
        done = kb.removals.remove_step("p", collection_id)
        steps += 1
        assert chunks - rows(engine, "knowledge_chunks") <= 3  # each step: at most REMOVE_CHUNKS
        if done:
            break
    gone_chunks = before["knowledge_chunks"] - 1
    assert steps > gone_chunks // 3
    assert tables(engine) == {
        "knowledge_collections": 1,
        "knowledge_documents": 1,
        "knowledge_chunks": 1,
        "knowledge_meta": 1,
        "knowledge_fts": 1,
    }
    assert [c["name"] for c in kb.collections("p")] == ["kept"]
    assert ids(kb.search("p", "walrus")) == ["k"]


def test_a_half_removed_collection_is_hidden_from_every_read_and_write(
    kb: KnowledgeService, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removal_module, "REMOVE_CHUNKS", 3)
    fill(kb)
    collection_id, _ = kb.removals.begin_removal("p", "gone", actor=ADMIN)
    assert not kb.removals.remove_step("p", collection_id)  # a crash here leaves a half
    assert rows(engine, "knowledge_documents") > 1  # some of gone's are left
    assert [c["name"] for c in kb.collections("p")] == ["kept"]
    with pytest.raises(NotFound):
        kb.collection("p", "gone")
    assert ids(kb.search("p", "walrus")) == ["k"]
    assert ids(kb.search("p", "walrus", filter={"i": 0})) == ["k"]
    with pytest.raises(NotFound):
        kb.search("p", "walrus", collection="gone")
    assert [d["id"] for d in kb.documents("p")["documents"]] == ["k"]
    with pytest.raises(NotFound):
        kb.documents("p", collection="gone")
    assert kb.get("p", "g4") is None
    assert not kb.remove("p", "g4", actor=ADMIN)
    assert [line.get("name") or line.get("id") for line in kb.export("p")] == ["kept", "k"]
    with pytest.raises(KnowledgeRefused, match="'gone' is being removed"):
        kb.add("p", "gone", actor=ADMIN, text="more")
    with pytest.raises(KnowledgeRefused, match="'gone' is being removed"):
        kb.create_collection("p", "gone", actor=ADMIN)
    with pytest.raises(KnowledgeRefused, match="which is being removed"):
        kb.add("p", "other", actor=ADMIN, doc_id="g4", text="moved")
    # Removing it again finishes it, audited once (when it was marked).
    assert kb.remove_collection("p", "gone", actor=ADMIN)["name"] == "gone"
    assert rows(engine, "knowledge_documents") == 1 and rows(engine, "knowledge_fts") == 1
    assert [e for e in audit_events(engine) if e[0] == "knowledge.collection.removed"] == [
        ("knowledge.collection.removed", "p", "gone")
    ]
    kb.create_collection("p", "gone", actor=ADMIN)  # the name is free again
    with pytest.raises(NotFound):
        kb.remove_collection("p", "nope", actor=ADMIN)


def test_a_removal_cut_short_is_finished_at_the_next_start(kb: KnowledgeService, engine: Engine) -> None:
    fill(kb)
    kb.removals.begin_removal("p", "gone", actor=ADMIN)
    again = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine)  # a new process

    async def start() -> None:
        await again.resume_removals()
        await again.close()

    anyio.run(start)
    assert tables(engine)["knowledge_documents"] == 1
    assert [c["name"] for c in kb.collections("p")] == ["kept"]


def test_a_removal_from_the_server_goes_on_in_steps_and_once(
    kb: KnowledgeService, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removal_module, "REMOVE_CHUNKS", 4)
    fill(kb)

    async def remove() -> list[dict[str, Any]]:
        both = []
        async with anyio.create_task_group() as tg:

            async def one() -> None:
                both.append(await kb.remove_collection_async("p", "gone", actor=ADMIN))

            tg.start_soon(one)
            tg.start_soon(one)
        await kb.close()
        return both

    assert anyio.run(remove) == [{"name": "gone", "removedDocuments": 5}] * 2
    assert tables(engine)["knowledge_documents"] == 1
    assert [e[0] for e in audit_events(engine)].count("knowledge.collection.removed") == 1


def test_a_large_document_loses_its_chunks_a_slice_a_step(
    kb: KnowledgeService, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removal_module, "REMOVE_CHUNKS", 2)
    kb.add("p", "big", actor=ADMIN, doc_id="b", text="many chunks of words. " * 400)
    chunks = rows(engine, "knowledge_chunks")
    assert chunks > 6
    collection_id, _ = kb.removals.begin_removal("p", "big", actor=ADMIN)
    assert not kb.removals.remove_step("p", collection_id)
    assert rows(engine, "knowledge_chunks") == chunks - 2 and rows(engine, "knowledge_documents") == 1
    kb.remove_collection("p", "big", actor=ADMIN)
    assert tables(engine) == dict.fromkeys(tables(engine), 0)


def test_an_export_is_read_a_bounded_batch_a_transaction(
    kb: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b", "c"):
        for i in range(3):
            kb.add("p", name, actor=ADMIN, doc_id=f"{name}{i}", text=f"text {name} {i} " * 50)
    whole = list(kb.export("p"))
    assert [line.get("name") or line.get("id") for line in whole] == [
        "a", "a0", "a1", "a2", "b", "b0", "b1", "b2", "c", "c0", "c1", "c2",
    ]  # fmt: skip
    monkeypatch.setattr(export_module, "EXPORT_BATCH_DOCUMENTS", 2)
    batches = []
    cursor = None
    while True:
        lines, cursor = kb.export_batch("p", None, cursor)
        batches.append(lines)
        if cursor is None:
            break
    assert all(sum(line["type"] == "document" for line in batch) <= 2 for batch in batches)
    assert [line for batch in batches for line in batch] == whole
    monkeypatch.setattr(export_module, "EXPORT_BATCH_BYTES", 1)  # at least one document a batch
    assert list(kb.export("p")) == whole
    assert [line.get("id") for line in kb.export("p", "b")] == [None, "b0", "b1", "b2"]
    assert kb.export_counts("p") == {"collections": 3, "documents": 9}
    with pytest.raises(NotFound):
        kb.export_counts("p", "nope")


class FixedEmbedder(Embedder):
    """Embeddings without an endpoint: DIMENSIONS floats a text (4 bytes each)."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9/v1/embeddings")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(t) % 7 + 1)] * DIMENSIONS for t in texts]


def test_stored_vectors_count_in_the_byte_cap(engine: Engine) -> None:
    vector = 4 * DIMENSIONS
    body = "x" * 100  # one chunk
    cap = 2 * len(body) + vector  # two texts fit, but not two texts and their two vectors
    kb = KnowledgeService(
        engine,
        audit=AuditLog(),
        audit_engine=engine,
        limits=Limits(max_bytes=cap),
        embedder=FixedEmbedder(),
    )
    kb.add("p", "docs", actor=ADMIN, doc_id="one", text=body)
    assert kb.collection("p", "docs")["vectorBytes"] == vector
    with pytest.raises(KnowledgeFull, match=f"at most {cap} bytes \\(text and vectors\\)"):
        kb.add("p", "docs", actor=ADMIN, doc_id="two", text="y" * 100)
    kb.add("p", "docs", actor=ADMIN, doc_id="one", text="z" * 100)  # replacing frees its own
    assert kb.collection("p", "docs")["vectorBytes"] == vector
    assert kb.remove("p", "one", actor=ADMIN)
    assert kb.collection("p", "docs")["vectorBytes"] == 0
    kb.add("p", "docs", actor=ADMIN, doc_id="two", text="y" * 100)
    assert kb.collection("p", "docs")["bytes"] == 100


def test_a_server_side_add_embeds_outside_the_database_steps(engine: Engine) -> None:
    """`add_many_async` runs its two database steps through `run` and embeds between them;
    the blocking `embed` is never reached (it would refuse inside `run_db`)."""
    seen: list[str] = []

    class Async(FixedEmbedder):
        def embed(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("the blocking embed was called")

        async def embed_async(self, texts: list[str]) -> list[list[float]]:
            seen.append("embed")
            return FixedEmbedder.embed(self, texts)

    kb = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, embedder=Async())

    async def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(fn.__name__)
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def add() -> dict[str, Any]:
        return await kb.add_async("p", "docs", actor=ADMIN, account="user:a", text="walrus text", run=run)

    assert anyio.run(add)["status"] == "added"
    assert seen == ["prepare_many", "embed", "write_many"]
    seen.clear()

    async def search() -> dict[str, Any]:
        return await kb.search_async("p", "walrus", account="user:a", mode="vector", run=run)

    assert ids(anyio.run(search)) == [kb.documents("p")["documents"][0]["id"]]
    assert seen == ["embed", "search_embedded"]
