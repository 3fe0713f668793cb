"""Queries of the knowledge base (webui.knowledge): collections, documents, their chunks and
filterable metadata, and the full-text index `knowledge_fts`.

On SQLite each indexed stem is spelt after its project's prefix (`7_run`, the project's number
in `knowledge_projects`: a project's
words are tokens of their own, so a search reads only its own project's postings and its
ranking counts only its own chunks), and each chunk's scope is held as tokens in a column of
its own (`scope`, weight 0 in the ranking): its collection and each filterable metadata pair,
hashed, each starting with `_`. No stem holds `_`, so neither can be spelt by a text or a
query. A search, its filters included, is then one query inside FTS5.

The index holds each chunk's stems (webui.knowledge.text) under the chunk's id: an FTS5 table
on SQLite (ranked by `bm25`), a `tsvector` table with a GIN index on PostgreSQL (ranked by
`ts_rank_cd`). The query reaching either is built from stems only. Writes go through the
caller's session, so a document, its chunks, their index rows and its metadata change in
one transaction. The search queries reading the index: webui.store.knowledge_search."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, text, update
from sqlmodel import Session, col, select

from webui.store.models import (
    KnowledgeChunk,
    KnowledgeCollection,
    KnowledgeDocument,
    KnowledgeMeta,
    KnowledgeProject,
)

_COLLECTIONS = cast(Table, KnowledgeCollection.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_DOCUMENTS = cast(Table, KnowledgeDocument.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_CHUNKS = cast(Table, KnowledgeChunk.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_META = cast(Table, KnowledgeMeta.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_PROJECTS = cast(Table, KnowledgeProject.__table__)  # pyright: ignore[reportAttributeAccessIssue]


@dataclass(frozen=True)
class Usage:
    documents: int
    size: int
    chunks: int
    vector_bytes: int = 0


@dataclass(frozen=True)
class ChunkRow:
    """One chunk to store: its place in the document, its text and its stems."""

    start: int
    end: int
    body: str
    terms: str
    vector: bytes | None = None


Filters = Sequence[tuple[str, Sequence[str]]]  # (key, canonical JSON values: any of them)


def _lock_project(s: Session, project_id: str) -> None:
    """Serialize a project's knowledge writers before they read what they count (the caps):
    a per-project advisory lock on PostgreSQL; on SQLite the database's write lock, taken
    by a write that changes nothing (a later upgrade from a read could fail at once)."""
    conn = s.connection()
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"knowledge:{project_id}"})
    else:
        conn.execute(text("UPDATE knowledge_collections SET id = id WHERE 0 = 1"))


def begin_write(s: Session, project_id: str) -> None:
    _lock_project(s, project_id)


def collection(s: Session, project_id: str, name: str) -> KnowledgeCollection | None:
    """The collection named, unless it is being removed."""
    row = collection_row(s, project_id, name)
    return None if row is None or row.removing else row


def collection_row(s: Session, project_id: str, name: str) -> KnowledgeCollection | None:
    """The collection named, even one being removed (its name is not free yet)."""
    query = select(KnowledgeCollection).where(
        KnowledgeCollection.project_id == project_id, KnowledgeCollection.name == name
    )
    return s.exec(query).first()


def collections(s: Session, project_id: str) -> list[tuple[KnowledgeCollection, int, int, int]]:
    """Each collection with its documents, chunks and bytes, by name (none being removed)."""
    rows = s.exec(
        select(KnowledgeCollection)
        .where(KnowledgeCollection.project_id == project_id, col(KnowledgeCollection.removing).is_(False))
        .order_by(col(KnowledgeCollection.name))
    ).all()
    return [(row, row.documents, row.chunks, row.size) for row in rows]


def removing(s: Session, project_id: str | None = None) -> list[KnowledgeCollection]:
    """The collections being removed (of the project; of every project with None)."""
    query = select(KnowledgeCollection).where(col(KnowledgeCollection.removing).is_(True))
    if project_id is not None:
        query = query.where(KnowledgeCollection.project_id == project_id)
    return list(s.exec(query.order_by(col(KnowledgeCollection.id))).all())


def _hidden(project_id: str) -> Any:
    """The ids of the project's collections being removed (their documents are not shown)."""
    return select(KnowledgeCollection.id).where(
        KnowledgeCollection.project_id == project_id, col(KnowledgeCollection.removing).is_(True)
    )


def add_collection(s: Session, project_id: str, name: str, language: str) -> KnowledgeCollection:
    row = KnowledgeCollection(project_id=project_id, name=name, language=language)
    s.add(row)
    s.flush()
    return row


def usage(s: Session, project_id: str) -> Usage:
    """What the project's knowledge base holds, collections being removed included (they
    hold it until they are gone)."""
    n, size, chunks, vectors = s.exec(
        select(
            func.coalesce(func.sum(KnowledgeCollection.documents), 0),
            func.coalesce(func.sum(KnowledgeCollection.size), 0),
            func.coalesce(func.sum(KnowledgeCollection.chunks), 0),
            func.coalesce(func.sum(KnowledgeCollection.vector_bytes), 0),
        ).where(KnowledgeCollection.project_id == project_id)
    ).one()
    return Usage(int(n), int(size), int(chunks), int(vectors))


def count(
    s: Session, collection_id: int, documents: int, chunks: int, size: int, vector_bytes: int = 0
) -> None:
    table = _COLLECTIONS
    s.connection().execute(
        update(table)
        .where(table.c.id == collection_id)
        .values(
            documents=table.c.documents + documents,
            chunks=table.c.chunks + chunks,
            size=table.c.size + size,
            vector_bytes=table.c.vector_bytes + vector_bytes,
        )
    )


def vector_bytes(s: Session, document_id: int) -> int:
    """The bytes of the document's stored vectors."""
    found = s.connection().execute(
        select(func.coalesce(func.sum(func.length(_CHUNKS.c.vector)), 0)).where(
            _CHUNKS.c.document_id == document_id, _CHUNKS.c.vector.is_not(None)
        )
    )
    return int(found.scalar_one())


def document(s: Session, project_id: str, doc_id: str) -> KnowledgeDocument | None:
    """The document, unless its collection is being removed."""
    query = select(KnowledgeDocument).where(
        KnowledgeDocument.project_id == project_id,
        KnowledgeDocument.doc_id == doc_id,
        col(KnowledgeDocument.collection_id).not_in(_hidden(project_id)),
    )
    return s.exec(query).first()


def documents_by_id(s: Session, project_id: str, doc_ids: Sequence[str]) -> dict[str, KnowledgeDocument]:
    found: dict[str, KnowledgeDocument] = {}
    unique = sorted(set(doc_ids))
    for at in range(0, len(unique), 500):
        query = select(KnowledgeDocument).where(
            KnowledgeDocument.project_id == project_id,
            col(KnowledgeDocument.doc_id).in_(unique[at : at + 500]),
        )
        found.update((row.doc_id, row) for row in s.exec(query).all())
    return found


def documents(
    s: Session,
    project_id: str,
    *,
    collection_id: int | None,
    filters: Filters,
    after: str | None,
    limit: int,
) -> list[KnowledgeDocument]:
    """A page of documents by id, after `after` (none of a collection being removed)."""
    query = select(KnowledgeDocument).where(KnowledgeDocument.project_id == project_id)
    if collection_id is not None:
        query = query.where(KnowledgeDocument.collection_id == collection_id)
    else:
        query = query.where(col(KnowledgeDocument.collection_id).not_in(_hidden(project_id)))
    for key, values in filters:
        having = select(KnowledgeMeta.document_id).where(
            KnowledgeMeta.key == key, col(KnowledgeMeta.value).in_(list(values))
        )
        query = query.where(col(KnowledgeDocument.id).in_(having))
    if after is not None:
        query = query.where(KnowledgeDocument.doc_id > after)
    return list(s.exec(query.order_by(col(KnowledgeDocument.doc_id)).limit(limit)).all())


def collection_documents(
    s: Session, collection_id: int, *, after: str | None = None, limit: int | None = None
) -> list[KnowledgeDocument]:
    """The collection's documents by id, after `after`, at most `limit`."""
    query = select(KnowledgeDocument).where(KnowledgeDocument.collection_id == collection_id)
    if after is not None:
        query = query.where(KnowledgeDocument.doc_id > after)
    query = query.order_by(col(KnowledgeDocument.doc_id))
    if limit is not None:
        query = query.limit(limit)
    return list(s.exec(query).all())


def chunks(s: Session, document_id: int) -> list[KnowledgeChunk]:
    query = select(KnowledgeChunk).where(KnowledgeChunk.document_id == document_id)
    return list(s.exec(query.order_by(col(KnowledgeChunk.position))).all())


def texts(s: Session, document_ids: Sequence[int]) -> dict[int, str]:
    """The text of each document named (its chunks in order), in one query."""
    if not document_ids:
        return {}
    rows = s.connection().execute(
        select(_CHUNKS.c.document_id, _CHUNKS.c.body)
        .where(_CHUNKS.c.document_id.in_(list(document_ids)))
        .order_by(_CHUNKS.c.document_id, _CHUNKS.c.position)
    )
    pieces: dict[int, list[str]] = {int(i): [] for i in document_ids}
    for document_id, body in rows:
        pieces[int(document_id)].append(body)
    return {i: "".join(parts) for i, parts in pieces.items()}


def scope_token(kind: str, *parts: str) -> str:
    """A scope token of SQLite's index (`_m_…`: a metadata pair, hashed); no stem holds `_`."""
    return f"_{kind}_" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:20]


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def term_prefix(s: Session, project_id: str, *, create: bool) -> str | None:
    """What the project's stems are spelt after in SQLite's index: its number in base 36 and
    `_` (`7_run`), numbered at its first write; None for a project with none yet."""
    cache: dict[str, str] = s.info.setdefault("knowledge_prefixes", {})
    if project_id in cache:
        return cache[project_id]
    conn = s.connection()
    table = _PROJECTS
    number = conn.execute(select(table.c.number).where(table.c.project_id == project_id)).scalar()
    if number is None:
        if not create:
            return None
        number = conn.execute(
            insert(table).returning(table.c.number), {"project_id": project_id}
        ).scalar_one()
    digits = ""
    n = int(number)
    while True:
        n, r = divmod(n, 36)
        digits = _DIGITS[r] + digits
        if n == 0:
            break
    cache[project_id] = f"{digits}_"
    return cache[project_id]


def _spelt(terms: str, prefix: str) -> str:
    return prefix + terms.replace(" ", " " + prefix) if terms else ""


def scope_terms(project_id: str, collection_id: int, meta: Sequence[tuple[str, str]]) -> str:
    """The `scope` column of a chunk's index row on SQLite."""
    tokens = [f"_c_{collection_id}"]
    tokens += [scope_token("m", key, value) for key, value in meta]
    return " ".join(tokens)


def add_document(
    s: Session, row: KnowledgeDocument, pieces: Sequence[ChunkRow], meta: Sequence[tuple[str, str]]
) -> None:
    """The document, its chunks, their index rows and its metadata rows: a few statements,
    whatever the number of chunks."""
    conn = s.connection()
    values = {c.name: getattr(row, c.name) for c in _DOCUMENTS.columns if c.name != "id"}
    row.id = int(conn.execute(insert(_DOCUMENTS).returning(_DOCUMENTS.c.id), values).scalar_one())
    if pieces:
        chunk_rows = [
            {
                "document_id": row.id,
                "position": i,
                "start": p.start,
                "end": p.end,
                "body": p.body,
                "vector": p.vector,
            }
            for i, p in enumerate(pieces)
        ]
        returning = insert(_CHUNKS).returning(_CHUNKS.c.id, sort_by_parameter_order=True)
        ids = [int(i) for i in conn.execute(returning, chunk_rows).scalars().all()]
        if conn.dialect.name == "postgresql":
            stmt = "INSERT INTO knowledge_fts (chunk_id, tsv) VALUES (:id, to_tsvector('simple', :terms))"
            index_rows = [{"id": i, "terms": p.terms} for i, p in zip(ids, pieces, strict=True)]
        else:
            stmt = "INSERT INTO knowledge_fts (rowid, terms, scope) VALUES (:id, :spelt, :scope)"
            scope = scope_terms(row.project_id, row.collection_id, meta)
            prefix = term_prefix(s, row.project_id, create=True)
            assert prefix is not None
            index_rows = [
                {"id": i, "spelt": _spelt(p.terms, prefix), "scope": scope}
                for i, p in zip(ids, pieces, strict=True)
            ]
        conn.execute(text(stmt), index_rows)
    if meta:
        conn.execute(insert(_META), [{"document_id": row.id, "key": k, "value": v} for k, v in meta])


def set_meta(s: Session, row: KnowledgeDocument, meta: Sequence[tuple[str, str]]) -> None:
    """The document's filterable metadata rows (and, on SQLite, its chunks' scope)."""
    assert row.id is not None
    conn = s.connection()
    conn.execute(delete(_META).where(_META.c.document_id == row.id))
    if meta:
        conn.execute(insert(_META), [{"document_id": row.id, "key": k, "value": v} for k, v in meta])
    if conn.dialect.name == "sqlite":
        conn.execute(
            text(
                "UPDATE knowledge_fts SET scope = :scope"
                " WHERE rowid IN (SELECT id FROM knowledge_chunks WHERE document_id = :d)"
            ),
            {"scope": scope_terms(row.project_id, row.collection_id, meta), "d": row.id},
        )


def remove_document(s: Session, row: KnowledgeDocument) -> None:
    """The document, its chunks, their index rows and its metadata rows."""
    assert row.id is not None
    conn = s.connection()
    column = "chunk_id" if conn.dialect.name == "postgresql" else "rowid"
    conn.execute(
        text(
            f"DELETE FROM knowledge_fts WHERE {column} IN"
            " (SELECT id FROM knowledge_chunks WHERE document_id = :d)"
        ),
        {"d": row.id},
    )
    conn.execute(delete(_CHUNKS).where(_CHUNKS.c.document_id == row.id))
    conn.execute(delete(_META).where(_META.c.document_id == row.id))
    conn.execute(delete(_DOCUMENTS).where(_DOCUMENTS.c.id == row.id))
    if row in s:
        s.expunge(row)


def mark_removing(s: Session, row: KnowledgeCollection) -> None:
    """From now on the collection is hidden from every read and write; its name is not free
    until `remove_batch` has removed its row."""
    s.connection().execute(update(_COLLECTIONS).where(_COLLECTIONS.c.id == row.id).values(removing=True))


def remove_batch(s: Session, collection_id: int, *, chunks: int, documents: int) -> tuple[int, bool]:
    """One bounded step of removing a collection marked so: its first documents (by row id)
    holding at most `chunks` chunks together and at most `documents` of them, with their
    chunks, index rows and metadata; a document of more chunks than that loses `chunks` of
    them a step until it goes. Once none is left, the collection's row. Returns (documents
    removed, whether the collection is gone)."""
    conn = s.connection()
    docs = conn.execute(
        select(_DOCUMENTS.c.id, _DOCUMENTS.c.chunks)
        .where(_DOCUMENTS.c.collection_id == collection_id)
        .order_by(_DOCUMENTS.c.id)
        .limit(documents)
    ).all()
    if not docs:
        conn.execute(delete(_COLLECTIONS).where(_COLLECTIONS.c.id == collection_id))
        return 0, True
    column = "chunk_id" if conn.dialect.name == "postgresql" else "rowid"
    first, held = int(docs[0][0]), int(docs[0][1])
    if held > chunks:  # a large document: a slice of its chunks this step
        ids = list(
            conn.execute(
                select(_CHUNKS.c.id)
                .where(_CHUNKS.c.document_id == first)
                .order_by(_CHUNKS.c.id)
                .limit(chunks)
            ).scalars()
        )
        if ids:
            ids_param = bindparam("ids", expanding=True)
            conn.execute(
                text(f"DELETE FROM knowledge_fts WHERE {column} IN :ids").bindparams(ids_param), {"ids": ids}
            )
            conn.execute(delete(_CHUNKS).where(_CHUNKS.c.id.in_(ids)))
        if len(ids) == chunks:
            return 0, False
        taken = [first]
    else:
        taken, total = [], 0
        for doc, n in docs:
            if taken and total + int(n) > chunks:
                break
            taken.append(int(doc))
            total += int(n)
    ids_param = bindparam("docs", expanding=True)
    conn.execute(
        text(
            f"DELETE FROM knowledge_fts WHERE {column} IN"
            " (SELECT id FROM knowledge_chunks WHERE document_id IN :docs)"
        ).bindparams(ids_param),
        {"docs": taken},
    )
    conn.execute(delete(_CHUNKS).where(_CHUNKS.c.document_id.in_(taken)))
    conn.execute(delete(_META).where(_META.c.document_id.in_(taken)))
    conn.execute(delete(_DOCUMENTS).where(_DOCUMENTS.c.id.in_(taken)))
    return len(taken), False
