"""Search queries of the knowledge base (webui.knowledge.search): ranked full-text search of a
project's chunks (`search`, bounded to the newest matches by `candidate_floor`), and the chunks
with an embedding for vector search (`vectors`, `matches_by_chunk`).

On SQLite a search, its filters included, is one FTS5 query: the project's stems spelt after
its prefix and the scope tokens of its collections and filters (webui.store.knowledge); on
PostgreSQL a `tsquery` on the `tsvector` table, filtered by joins."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import bindparam, text
from sqlmodel import Session, col, select

from webui.store.knowledge import Filters, scope_token, term_prefix
from webui.store.models import KnowledgeChunk, KnowledgeDocument, KnowledgeMeta


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


def _scope_match(collection_ids: Sequence[int] | None, filters: Filters) -> str:
    groups: list[str] = []
    if collection_ids is not None:
        groups.append("(" + " OR ".join(f'"_c_{int(c)}"' for c in collection_ids) + ")")
    for key, values in filters:
        groups.append("(" + " OR ".join(f'"{scope_token("m", key, v)}"' for v in values) + ")")
    return " AND ".join(groups)


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
