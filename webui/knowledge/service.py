"""The knowledge base of each project: named collections of documents, split into chunks and
indexed for ranked full-text search (webui.store.knowledge), with optional vector search where
an embedding endpoint is configured (webui.knowledge.embeddings).

Every method blocks (call it through `run_db`). Writes are one transaction each: a document
is added or replaced with all its chunks, index rows and metadata rows, or not at all, and
the caps of its project are counted in that transaction. Each write is audited; the event
commits with the change when the knowledge base lives in the main store, else right after.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound
from webui.knowledge import text as kt
from webui.knowledge.embeddings import Embedder
from webui.knowledge.extract import extract
from webui.knowledge.model import (
    MAX_PAGE,
    MAX_SEARCH_LIMIT,
    Actor,
    Limits,
    check_doc_id,
    check_limit,
    check_metadata,
    check_name,
    check_title,
    meta_pairs,
    parse_filter,
)
from webui.store import knowledge as ks
from webui.store.models import KnowledgeCollection, KnowledgeDocument, as_utc, utcnow

VECTOR_SCAN_CAP = 50_000  # chunks a vector search compares at most
RRF_K = 60  # reciprocal rank fusion: score = sum 1 / (RRF_K + rank)


def document_view(row: KnowledgeDocument, collection: str, text: str | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": row.doc_id,
        "collection": collection,
        "title": row.title,
        "metadata": row.meta,
        "source": row.source,
        "digest": row.digest,
        "bytes": row.size,
        "chunks": row.chunks,
        "createdAt": as_utc(row.created_at).isoformat(),
        "updatedAt": as_utc(row.updated_at).isoformat(),
    }
    if text is not None:
        view["text"] = text
    return view


def collection_view(row: KnowledgeCollection, documents: int, chunks: int, size: int) -> dict[str, Any]:
    return {
        "name": row.name,
        "language": row.language,
        "documents": documents,
        "chunks": chunks,
        "bytes": size,
        "createdAt": as_utc(row.created_at).isoformat(),
    }


class KnowledgeService:
    """`engine`: where the knowledge base lives (the main store, or the SQLite file of
    `--persistent-value-store-dir`); `audit_engine`: the main store."""

    def __init__(
        self,
        engine: Engine,
        *,
        audit: AuditLog,
        audit_engine: Engine,
        limits: Limits | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.engine = engine
        self.audit = audit
        self.audit_engine = audit_engine
        self.limits = limits or Limits()
        self.embedder = embedder

    # ------------------------------------------------------------------ reads

    def collections(self, project_id: str) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            return [collection_view(*row) for row in ks.collections(s, project_id)]

    def collection(self, project_id: str, name: str) -> dict[str, Any]:
        for view in self.collections(project_id):
            if view["name"] == name:
                return view
        raise NotFound(f"collection {name!r} not found")

    def get(self, project_id: str, doc_id: str, *, with_text: bool = True) -> dict[str, Any] | None:
        check_doc_id(doc_id)
        with Session(self.engine) as s:
            row = ks.document(s, project_id, doc_id)
            if row is None or row.id is None:
                return None
            coll = s.get(KnowledgeCollection, row.collection_id)
            text = "".join(c.body for c in ks.chunks(s, row.id)) if with_text else None
            return document_view(row, coll.name if coll else "?", text)

    def documents(
        self,
        project_id: str,
        *,
        collection: str | None = None,
        filter: Any = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """A page of documents by id; `next` is the `after` of the next page (None: the last)."""
        filters = parse_filter(filter)
        size = check_limit(limit, 50, MAX_PAGE)
        with Session(self.engine) as s:
            names = {c.id: c.name for c, *_ in ks.collections(s, project_id)}
            cid = None
            if collection is not None:
                found = ks.collection(s, project_id, check_name(collection))
                if found is None:
                    raise NotFound(f"collection {collection!r} not found")
                cid = found.id
            rows = ks.documents(
                s, project_id, collection_id=cid, filters=filters, after=after, limit=size + 1
            )
        more = len(rows) > size
        rows = rows[:size]
        return {
            "documents": [document_view(r, names.get(r.collection_id, "?")) for r in rows],
            "next": rows[-1].doc_id if more and rows else None,
        }

    def search(
        self,
        project_id: str,
        query: str,
        *,
        collection: str | list[str] | None = None,
        filter: Any = None,
        limit: int | None = None,
        mode: str = "auto",
    ) -> dict[str, Any]:
        """The best chunks for `query`, best first, each with its document, a snippet and the
        positions of the matching words in it. `mode`: `text`, `vector`, `hybrid`, or `auto`
        (hybrid with an embedding endpoint, else text)."""
        if not isinstance(query, str):
            raise KnowledgeRefused("the query must be a string")
        if mode not in ("auto", "text", "vector", "hybrid"):
            raise KnowledgeRefused("mode must be auto, text, vector or hybrid")
        if mode in ("vector", "hybrid") and self.embedder is None:
            raise KnowledgeRefused(f"{mode} search needs an embedding endpoint (STEAMHARNESS_EMBEDDINGS_URL)")
        used = ("hybrid" if self.embedder is not None else "text") if mode == "auto" else mode
        size = check_limit(limit, 10, MAX_SEARCH_LIMIT)
        filters = parse_filter(filter)
        names = [collection] if isinstance(collection, str) else collection
        if names is not None and (not isinstance(names, list) or not names):
            raise KnowledgeRefused("collection must be a name or a non-empty list of names")
        with Session(self.engine) as s:
            ids: list[int] | None = None
            languages: set[str] = set()
            if names is not None:
                ids = []
                for name in names:
                    row = ks.collection(s, project_id, check_name(name))
                    if row is None or row.id is None:
                        raise NotFound(f"collection {name!r} not found")
                    ids.append(row.id)
                    languages.add(row.language)
            else:
                languages = {c.language for c, *_ in ks.collections(s, project_id)}
            try:
                parsed = {lang: kt.parse_query(query, lang) for lang in languages or {kt.DEFAULT_LANGUAGE}}
            except kt.QueryRefused as exc:
                raise KnowledgeRefused(str(exc)) from None
            text_hits: list[ks.Match] = []
            if used != "vector":
                pool = size if used == "text" else max(size * 3, 30)
                for lang, q in parsed.items():
                    chosen = self._of_language(s, project_id, ids, lang, languages)
                    text_hits += ks.search(
                        s, project_id, q, collection_ids=chosen, filters=filters, limit=pool
                    )
                text_hits.sort(key=lambda m: (-m.score, m.chunk_id))
            vector_hits: list[ks.Match] = []
            if used in ("vector", "hybrid"):
                vector_hits = self._vector_search(s, project_id, query, ids, filters, max(size * 3, 30))
        hits = _fuse(text_hits, vector_hits, size) if used == "hybrid" else (text_hits or vector_hits)[:size]
        return {"mode": used, "hits": [self._hit(m, parsed) for m in hits]}

    def _of_language(
        self, s: Session, project_id: str, ids: list[int] | None, language: str, languages: set[str]
    ) -> list[int] | None:
        """The collections (of those searched) that stem for `language`; None: all of them."""
        if len(languages) <= 1:
            return ids
        rows = [c for c, *_ in ks.collections(s, project_id) if c.language == language and c.id is not None]
        chosen = [c.id for c in rows if ids is None or c.id in ids]
        return [i for i in chosen if i is not None]

    def _hit(self, m: ks.Match, parsed: dict[str, kt.Query]) -> dict[str, Any]:
        q = parsed.get(m.language)
        cut = kt.snippet(m.body, q.stems if q else frozenset(), m.language)
        return {
            "documentId": m.doc_id,
            "collection": m.collection,
            "title": m.title,
            "metadata": m.meta,
            "chunk": {"position": m.position, "start": m.start, "end": m.end},
            "score": m.score,
            "snippet": cut.text,
            "highlights": [list(h) for h in cut.highlights],
        }

    def _vector_search(
        self, s: Session, project_id: str, query: str, ids: list[int] | None, filters: Any, pool: int
    ) -> list[ks.Match]:
        """The chunks nearest to the query's embedding by cosine, compared in batches (at most
        VECTOR_SCAN_CAP chunks; memory stays one batch)."""
        import numpy as np

        assert self.embedder is not None
        [wanted] = self.embedder.embed([query])
        target = np.asarray(wanted, dtype=np.float32)
        norm = float(np.linalg.norm(target))
        if not norm:
            return []
        target /= norm
        best: list[tuple[float, int]] = []
        rows = ks.vectors(s, project_id, collection_ids=ids, filters=filters, cap=VECTOR_SCAN_CAP)
        for at in range(0, len(rows), 2048):
            batch = [(c, b) for c, b in rows[at : at + 2048] if len(b) == 4 * len(target)]
            if not batch:
                continue
            matrix = np.frombuffer(b"".join(b for _, b in batch), dtype="<f4").reshape(
                len(batch), len(target)
            )
            norms = np.linalg.norm(matrix, axis=1)
            norms[norms == 0] = 1.0
            scores = (matrix @ target) / norms
            best += [(float(v), c) for v, (c, _) in zip(scores.tolist(), batch, strict=True)]
            best.sort(key=lambda x: (-x[0], x[1]))
            del best[pool:]
        found = ks.matches_by_chunk(s, [c for _, c in best])
        return [replace(found[c], score=v) for v, c in best if c in found]

    def export(self, project_id: str, collection: str | None = None) -> Iterator[dict[str, Any]]:
        """JSON lines: each collection, then each of its documents with its text."""
        with Session(self.engine) as s:
            for coll, *_ in ks.collections(s, project_id):
                if collection is not None and coll.name != collection:
                    continue
                assert coll.id is not None
                yield {"type": "collection", "name": coll.name, "language": coll.language}
                for row in ks.collection_documents(s, coll.id):
                    assert row.id is not None
                    yield {
                        "type": "document",
                        "collection": coll.name,
                        "id": row.doc_id,
                        "title": row.title,
                        "metadata": row.meta,
                        "source": row.source,
                        "text": "".join(c.body for c in ks.chunks(s, row.id)),
                    }

    # ------------------------------------------------------------------ writes

    def create_collection(
        self, project_id: str, name: str, *, language: str | None = None, actor: Actor
    ) -> dict[str, Any]:
        """The collection (created when new; the same language again changes nothing)."""
        check_name(name)
        lang = self._language(language)
        with Session(self.engine) as s:
            ks.begin_write(s, project_id)
            row = ks.collection(s, project_id, name)
            if row is not None:
                if language is not None and row.language != lang:
                    raise KnowledgeRefused(f"collection {name!r} exists with language {row.language!r}")
                s.rollback()
                return {**self.collection(project_id, name), "created": False}
            self._new_collection(s, project_id, name, lang)
            self._audit(
                s, AuditName.KNOWLEDGE_COLLECTION_CREATED, project_id, actor, name, {"language": lang}
            )
        return {**self.collection(project_id, name), "created": True}

    def remove_collection(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        check_name(name)
        with Session(self.engine) as s:
            ks.begin_write(s, project_id)
            row = ks.collection(s, project_id, name)
            if row is None:
                raise NotFound(f"collection {name!r} not found")
            removed = ks.remove_collection(s, row)
            self._audit(
                s, AuditName.KNOWLEDGE_COLLECTION_REMOVED, project_id, actor, name, {"documents": removed}
            )
        return {"name": name, "removedDocuments": removed}

    def add(
        self,
        project_id: str,
        collection: str,
        *,
        actor: Actor,
        text: str | None = None,
        file_name: str | None = None,
        data: bytes | None = None,
        doc_id: str | None = None,
        title: str | None = None,
        metadata: Any = None,
    ) -> dict[str, Any]:
        """Add a document from `text`, or from a file (`file_name` + `data`). Without `doc_id`
        its id comes from its collection and text, so the same text added again changes
        nothing; with one, a different text replaces the document's chunks at once. Returns
        the document and `status`: added, replaced, updated (title or metadata only) or
        unchanged."""
        check_name(collection)
        if doc_id is not None:
            check_doc_id(doc_id)
        meta = check_metadata(metadata)
        source, body, found_title = self._text(text, file_name, data)
        digest = hashlib.sha256(body.encode()).hexdigest()
        doc_id = doc_id or "d-" + hashlib.sha256(f"{collection}\n{body}".encode()).hexdigest()[:24]
        first_line = body.strip().split("\n", 1)[0].strip()
        doc_title = check_title(title if title else found_title, file_name or first_line or doc_id)
        with Session(self.engine) as s:
            existing_coll = ks.collection(s, project_id, collection)
        language = existing_coll.language if existing_coll else kt.DEFAULT_LANGUAGE
        spans = kt.chunk_spans(body)
        pieces = [ks.ChunkRow(a, b, body[a:b], kt.terms(body[a:b], language)) for a, b in spans]
        pieces = self._embedded(pieces)
        pairs = meta_pairs(meta)
        size = len(body.encode())
        with Session(self.engine) as s:
            ks.begin_write(s, project_id)
            coll = ks.collection(s, project_id, collection)
            if coll is None:
                coll = self._new_collection(s, project_id, collection, language)
                self._audit(
                    s,
                    AuditName.KNOWLEDGE_COLLECTION_CREATED,
                    project_id,
                    actor,
                    collection,
                    {"language": language},
                )
            elif coll.language != language:  # changed in between: stem again
                raise KnowledgeRefused(f"collection {collection!r} changed while adding; add again")
            assert coll.id is not None
            row = ks.document(s, project_id, doc_id)
            if row is not None and row.collection_id != coll.id:
                other = s.get(KnowledgeCollection, row.collection_id)
                where = other.name if other else "?"
                raise KnowledgeRefused(
                    f"document {doc_id!r} is in collection {where!r}; remove it there first"
                )
            if row is not None and row.digest == digest:
                if row.title == doc_title and row.meta == meta:
                    return {**document_view(row, collection), "status": "unchanged"}
                assert row.id is not None
                row.title, row.meta, row.updated_at = doc_title, meta, utcnow()
                s.add(row)
                ks.set_meta(s, row.id, pairs)
                status = "updated"
            else:
                self._check_caps(s, project_id, row, size, len(pieces))
                created_at = row.created_at if row is not None else utcnow()
                if row is not None:
                    ks.remove_document(s, row)
                status = "replaced" if row is not None else "added"
                row = KnowledgeDocument(
                    project_id=project_id,
                    collection_id=coll.id,
                    doc_id=doc_id,
                    title=doc_title,
                    meta=meta,
                    source=source,
                    digest=digest,
                    size=size,
                    chunks=len(pieces),
                    created_at=created_at,
                )
                ks.add_document(s, row, pieces, pairs)
            event = {
                "added": AuditName.KNOWLEDGE_DOCUMENT_ADDED,
                "replaced": AuditName.KNOWLEDGE_DOCUMENT_REPLACED,
                "updated": AuditName.KNOWLEDGE_DOCUMENT_UPDATED,
            }[status]
            details = {"collection": collection, "document": doc_id, "bytes": size, "chunks": len(pieces)}
            self._audit(s, event, project_id, actor, doc_id, details)
            view = document_view(row, collection)
        return {**view, "status": status}

    def remove(self, project_id: str, doc_id: str, *, actor: Actor) -> bool:
        check_doc_id(doc_id)
        with Session(self.engine) as s:
            ks.begin_write(s, project_id)
            row = ks.document(s, project_id, doc_id)
            if row is None:
                return False
            coll = s.get(KnowledgeCollection, row.collection_id)
            ks.remove_document(s, row)
            details = {"collection": coll.name if coll else None, "document": doc_id}
            self._audit(s, AuditName.KNOWLEDGE_DOCUMENT_REMOVED, project_id, actor, doc_id, details)
        return True

    def import_lines(self, project_id: str, lines: Iterable[Any], *, actor: Actor) -> dict[str, Any]:
        """Apply an export: collections are created, documents added or replaced by id. Stops
        at the first line it cannot use, naming it; what came before stays."""
        counts = {"collections": 0, "added": 0, "replaced": 0, "updated": 0, "unchanged": 0}
        for number, line in enumerate(lines, start=1):
            where = f"line {number}"
            if not isinstance(line, dict) or line.get("type") not in ("collection", "document"):
                raise KnowledgeRefused(f'{where}: expected an object with "type": "collection" or "document"')
            try:
                if line["type"] == "collection":
                    done = self.create_collection(
                        project_id, str(line.get("name")), language=line.get("language"), actor=actor
                    )
                    counts["collections"] += int(done["created"])
                else:
                    if not isinstance(line.get("text"), str):
                        raise KnowledgeRefused('a document needs its "text"')
                    done = self.add(
                        project_id,
                        str(line.get("collection")),
                        actor=actor,
                        text=line["text"],
                        doc_id=line.get("id"),
                        title=line.get("title"),
                        metadata=line.get("metadata"),
                    )
                    counts[done["status"]] += 1
            except (KnowledgeRefused, KnowledgeFull) as exc:
                raise type(exc)(f"{where}: {exc.message}", **_cap_args(exc)) from None
        return counts

    # ------------------------------------------------------------------ helpers

    def _language(self, language: str | None) -> str:
        try:
            return kt.check_language(language or kt.DEFAULT_LANGUAGE)
        except ValueError as exc:
            raise KnowledgeRefused(str(exc)) from None

    def _new_collection(self, s: Session, project_id: str, name: str, language: str) -> KnowledgeCollection:
        cap = self.limits.max_collections
        if cap and len(ks.collections(s, project_id)) >= cap:
            raise KnowledgeFull(f"the project's knowledge base holds {cap} collections already", limit=cap)
        return ks.add_collection(s, project_id, name, language)

    def _text(
        self, text: str | None, file_name: str | None, data: bytes | None
    ) -> tuple[str, str, str | None]:
        """(source, text, title found in the file)."""
        limits = self.limits
        if (text is None) == (data is None):
            raise KnowledgeRefused("give a document's text or a file, not both")
        if data is not None:
            name = file_name or "upload"
            if len(data) > limits.max_file_bytes:
                raise KnowledgeRefused(f"{name}: larger than {limits.max_file_bytes} bytes")
            body, found_title = extract(name, data)
            source = name
        else:
            if not isinstance(text, str):
                raise KnowledgeRefused("the text must be a string")
            body, found_title, source = text, None, "text"
        if "\x00" in body:
            body = body.replace("\x00", "")  # PostgreSQL text holds no NUL
        if not body.strip():
            raise KnowledgeRefused(f"{source}: has no text to index")
        if len(body.encode()) > limits.max_document_bytes:
            raise KnowledgeRefused(f"{source}: its text is larger than {limits.max_document_bytes} bytes")
        return source, body, found_title

    def _embedded(self, pieces: list[ks.ChunkRow]) -> list[ks.ChunkRow]:
        if self.embedder is None or not pieces:
            return pieces
        vectors = self.embedder.embed([p.body for p in pieces])
        return [
            ks.ChunkRow(p.start, p.end, p.body, p.terms, pack_vector(v))
            for p, v in zip(pieces, vectors, strict=True)
        ]

    def _check_caps(
        self, s: Session, project_id: str, replaced: KnowledgeDocument | None, size: int, chunks: int
    ) -> None:
        used = ks.usage(s, project_id)
        docs = used.documents + (0 if replaced else 1)
        total = used.size + size - (replaced.size if replaced else 0)
        pieces = used.chunks + chunks - (replaced.chunks if replaced else 0)
        limits = self.limits
        for cap, value, what in (
            (limits.max_documents, docs, "documents"),
            (limits.max_bytes, total, "bytes of text"),
            (limits.max_chunks, pieces, "chunks"),
        ):
            if cap and value > cap:
                raise KnowledgeFull(f"the project's knowledge base may hold at most {cap} {what}", limit=cap)

    def _audit(
        self,
        s: Session,
        event: AuditName,
        project_id: str,
        actor: Actor,
        target: str,
        details: dict[str, Any],
    ) -> None:
        fields = {
            "actor": actor.actor,
            "project_id": project_id,
            "target": target,
            "source": actor.source,
            "run_id": actor.run_id,
            "client_address": actor.client_address,
            "user_agent": actor.user_agent,
            "details": details,
        }
        if self.engine is self.audit_engine:
            self.audit.record(s, event, **fields)
            s.commit()
        else:
            s.commit()
            self.audit.record_alone(self.audit_engine, event, **fields)


def _cap_args(exc: Exception) -> dict[str, Any]:
    return {"limit": exc.limit} if isinstance(exc, KnowledgeFull) else {}


def pack_vector(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def _fuse(text_hits: list[ks.Match], vector_hits: list[ks.Match], size: int) -> list[ks.Match]:
    """Reciprocal rank fusion of the two rankings (ties by chunk id)."""
    scores: dict[int, float] = {}
    by_id: dict[int, ks.Match] = {}
    for ranking in (text_hits, vector_hits):
        for rank, m in enumerate(ranking, start=1):
            scores[m.chunk_id] = scores.get(m.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            by_id.setdefault(m.chunk_id, m)
    best = sorted(scores, key=lambda c: (-scores[c], c))[:size]
    return [replace(by_id[c], score=scores[c]) for c in best]
