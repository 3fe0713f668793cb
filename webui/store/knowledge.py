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
one transaction."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

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


@dataclass(frozen=True)
class Match:
    chunk_id: int
    document_id: int
    position: int
    start: int
    end: int
    body: str
    doc_id: str
    title: str
    meta: dict[str, Any]
    collection: str
    language: str
    score: float


class MatchText(Protocol):
    """A parsed query as each engine spells it (webui.knowledge.text.Query)."""

    def fts5(self, prefix: str = "") -> str: ...
    def tsquery(self) -> str: ...


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


def _token(kind: str, *parts: str) -> str:
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


def scope_terms(project_id: str, collection_id: int, meta: Sequence[tuple[str, str]]) -> str:
    """The `scope` column of a chunk's index row on SQLite."""
    tokens = [f"_c_{collection_id}"]
    tokens += [_token("m", key, value) for key, value in meta]
    return " ".join(tokens)


def _scope_match(collection_ids: Sequence[int] | None, filters: Filters) -> str:
    groups: list[str] = []
    if collection_ids is not None:
        groups.append("(" + " OR ".join(f'"_c_{int(c)}"' for c in collection_ids) + ")")
    for key, values in filters:
        groups.append("(" + " OR ".join(f'"{_token("m", key, v)}"' for v in values) + ")")
    return " AND ".join(groups)


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


_JOINS = (
    "JOIN knowledge_documents d ON d.id = c.document_id"
    " JOIN knowledge_collections k ON k.id = d.collection_id"
)
_MATCH_COLUMNS = (
    'c.id, c.document_id, c.position, c.start, c."end", c.body, d.doc_id, d.title, d.meta, k.name, k.language'
)


def _scope(
    project_id: str, collection_ids: Sequence[int] | None, filters: Filters
) -> tuple[list[str], dict[str, Any], list[Any]]:
    """The WHERE clauses keeping a search to the project, its collections and filters."""
    params: dict[str, Any] = {"project": project_id}
    where = ["d.project_id = :project"]
    binds: list[Any] = []
    if collection_ids is not None:
        where.append("d.collection_id IN :collections")
        params["collections"] = list(collection_ids)
        binds.append(bindparam("collections", expanding=True))
    for i, (key, values) in enumerate(filters):
        where.append(f"d.id IN (SELECT document_id FROM knowledge_meta WHERE key = :k{i} AND value IN :v{i})")
        params[f"k{i}"] = key
        params[f"v{i}"] = list(values)
        binds.append(bindparam(f"v{i}", expanding=True))
    return where, params, binds


def _matching(dialect: str, query: MatchText, params: dict[str, Any]) -> tuple[str, str, str, str]:
    """(FROM … JOIN, the match condition, the rank expression, the index's chunk id) as the
    dialect spells them."""
    if dialect == "postgresql":
        params["q"] = query.tsquery()
        source = (
            "(SELECT to_tsquery('simple', :q) AS q) AS q JOIN knowledge_fts f ON f.tsv @@ q.q"
            f" JOIN knowledge_chunks c ON c.id = f.chunk_id {_JOINS}"
        )
        return source, "TRUE", "ts_rank_cd(f.tsv, q.q, 1)", "f.chunk_id"
    params["q"] = query.fts5()
    source = f"knowledge_fts JOIN knowledge_chunks c ON c.id = knowledge_fts.rowid {_JOINS}"
    return source, "knowledge_fts MATCH :q", "-bm25(knowledge_fts)", "knowledge_fts.rowid"


def candidate_floor(
    s: Session,
    project_id: str,
    query: MatchText,
    *,
    collection_ids: Sequence[int] | None,
    filters: Filters,
    cap: int,
) -> int | None:
    """When more than `cap` of the project's chunks match, the id of the `cap`-th newest (a
    search then ranks only those from it on: scoring every match of a word in most chunks
    costs far more than finding them); None when `cap` or fewer match."""
    conn = s.connection()
    if conn.dialect.name == "sqlite":
        sql = (
            "SELECT rowid FROM knowledge_fts WHERE knowledge_fts MATCH :q"
            " ORDER BY rowid DESC LIMIT 1 OFFSET :skip"
        )
        prefix = term_prefix(s, project_id, create=False)
        if prefix is None:
            return None
        q = _fts5(query, prefix, collection_ids, filters)
        found = conn.execute(text(sql), {"q": q, "skip": cap}).scalar()
        return None if found is None else int(found) + 1
    where, params, binds = _scope(project_id, collection_ids, filters)
    source, match, _, chunk_id = _matching(conn.dialect.name, query, params)
    params["skip"] = cap
    sql = (
        f"SELECT {chunk_id} FROM {source} WHERE {match} AND {' AND '.join(where)}"
        f" ORDER BY {chunk_id} + 0 DESC LIMIT 1 OFFSET :skip"  # + 0: not by walking the key (a scan)
    )
    found = conn.execute(text(sql).bindparams(*binds), params).scalar()
    return None if found is None else int(found) + 1


def search(
    s: Session,
    project_id: str,
    query: MatchText,
    *,
    collection_ids: Sequence[int] | None,
    filters: Filters,
    limit: int,
    floor: int | None = None,
) -> list[Match]:
    """The best `limit` chunks of the project matching every phrase of `query`, best first
    (ties by chunk id); with `floor`, only among the chunks from that id on."""
    conn = s.connection()
    if conn.dialect.name == "sqlite":
        return _search_sqlite(s, project_id, query, collection_ids, filters, limit, floor)
    where, params, binds = _scope(project_id, collection_ids, filters)
    source, match, rank, chunk_id = _matching(conn.dialect.name, query, params)
    params["limit"] = limit
    if floor is not None:
        where.append(f"{chunk_id} >= :floor")
        params["floor"] = floor
    sql = (
        f"SELECT {_MATCH_COLUMNS}, {rank} AS score FROM {source}"
        f" WHERE {match} AND {' AND '.join(where)} ORDER BY score DESC, c.id LIMIT :limit"
    )
    rows = conn.execute(text(sql).bindparams(*binds), params).all()
    return [_match(row) for row in rows]


def _spelt(terms: str, prefix: str) -> str:
    return prefix + terms.replace(" ", " " + prefix) if terms else ""


def _fts5(query: MatchText, prefix: str, collection_ids: Sequence[int] | None, filters: Filters) -> str:
    words = f"terms : ({query.fts5(prefix)})"
    if collection_ids is None and not filters:
        return words
    return f"scope : ({_scope_match(collection_ids, filters)}) AND {words}"


def _search_sqlite(
    s: Session,
    project_id: str,
    query: MatchText,
    collection_ids: Sequence[int] | None,
    filters: Filters,
    limit: int,
    floor: int | None,
) -> list[Match]:
    """Ranked inside FTS5 alone (its scope tokens keep it to the project and the filters),
    then only the best `limit` joined to their chunks and documents."""
    prefix = term_prefix(s, project_id, create=False)
    if prefix is None:
        return []
    params: dict[str, Any] = {"q": _fts5(query, prefix, collection_ids, filters), "limit": limit}
    bound = ""
    if floor is not None:
        bound = " AND rowid >= :floor"
        params["floor"] = floor
    sql = (
        f"SELECT {_MATCH_COLUMNS}, m.score FROM"
        " (SELECT rowid AS id, -bm25(knowledge_fts, 1.0, 0.0) AS score FROM knowledge_fts"
        f" WHERE knowledge_fts MATCH :q{bound} ORDER BY score DESC, rowid LIMIT :limit) AS m"
        f" JOIN knowledge_chunks c ON c.id = m.id {_JOINS}"
        " WHERE d.project_id = :project ORDER BY m.score DESC, c.id"
    )
    params["project"] = project_id  # what the scope tokens chose, checked once more
    rows = s.connection().execute(text(sql), params).all()
    return [_match(row) for row in rows]


def _match(row: Any) -> Match:
    meta = row[8]
    if isinstance(meta, str):  # raw SQL on SQLite returns the JSON text
        meta = json.loads(meta)
    return Match(
        chunk_id=int(row[0]),
        document_id=int(row[1]),
        position=int(row[2]),
        start=int(row[3]),
        end=int(row[4]),
        body=row[5],
        doc_id=row[6],
        title=row[7],
        meta=meta or {},
        collection=row[9],
        language=row[10],
        score=float(row[11]),
    )


def vectors(
    s: Session, project_id: str, *, collection_ids: Sequence[int] | None, filters: Filters, cap: int
) -> list[tuple[int, bytes]]:
    """(chunk id, embedding) of up to `cap` chunks of the project that have one."""
    query = (
        select(KnowledgeChunk.id, KnowledgeChunk.vector)
        .join(KnowledgeDocument, col(KnowledgeDocument.id) == col(KnowledgeChunk.document_id))
        .where(KnowledgeDocument.project_id == project_id, col(KnowledgeChunk.vector).is_not(None))
    )
    if collection_ids is not None:
        query = query.where(col(KnowledgeDocument.collection_id).in_(list(collection_ids)))
    for key, values in filters:
        having = select(KnowledgeMeta.document_id).where(
            KnowledgeMeta.key == key, col(KnowledgeMeta.value).in_(list(values))
        )
        query = query.where(col(KnowledgeDocument.id).in_(having))
    rows = s.exec(query.order_by(col(KnowledgeChunk.id)).limit(cap)).all()
    return [(int(i), bytes(v)) for i, v in rows if i is not None and v is not None]


def matches_by_chunk(s: Session, chunk_ids: Sequence[int]) -> dict[int, Match]:
    """The chunks named, as matches scored 0 (vector search ranks them itself)."""
    if not chunk_ids:
        return {}
    conn = s.connection()
    sql = f"SELECT {_MATCH_COLUMNS}, 0.0 FROM knowledge_chunks c {_JOINS} WHERE c.id IN :ids"
    rows = conn.execute(
        text(sql).bindparams(bindparam("ids", expanding=True)), {"ids": list(chunk_ids)}
    ).all()
    return {int(row[0]): _match(row) for row in rows}
