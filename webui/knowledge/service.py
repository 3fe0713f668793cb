"""The knowledge base of each project: named collections of documents, split into chunks and
indexed for ranked full-text search (webui.store.knowledge), with optional vector search where
an embedding endpoint is configured (webui.knowledge.embeddings).

Every method blocks (call it through `run_db`). Writes are one transaction each: a document
is added or replaced with all its chunks, index rows and metadata rows, or not at all, and
the caps of its project are counted in that transaction. Each write is audited; the event
commits with the change when the knowledge base lives in the main store, else right after.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound
from webui.knowledge import text as kt
from webui.knowledge.embeddings import Embedder
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
from webui.knowledge.reader import FileReader, FileText
from webui.store import knowledge as ks
from webui.store.models import KnowledgeCollection, KnowledgeDocument, as_utc, utcnow

VECTOR_SCAN_CAP = 50_000  # chunks a vector search compares at most
IMPORT_BATCH = 100  # documents an import writes in one transaction
# A query matching more chunks than this (a word in most of them) is ranked among the newest
# this many of its matches only, and says so (`approximate`): finding matches is cheap,
# scoring each is not (BM25 over 100k matches costs ~200 ms).
RANKED_CANDIDATES = 4000
RRF_K = 60  # reciprocal rank fusion: score = sum 1 / (RRF_K + rank)


@dataclass(frozen=True)
class NewDocument:
    """A document to add: its text, or a file's name and bytes."""

    collection: str
    text: str | None = None
    file_name: str | None = None
    data: bytes | None = None
    doc_id: str | None = None
    title: str | None = None
    metadata: Any = None
    source: str | None = None  # for a text: where it came from (an import keeps the export's)
    file: FileText | None = None  # a file's text, read already (FileReader.read)


@dataclass(frozen=True)
class _Prepared:
    collection: str
    language: str
    doc_id: str
    title: str
    meta: dict[str, Any]
    pairs: list[tuple[str, str]]
    source: str
    digest: str
    size: int
    pieces: list[ks.ChunkRow]


_Event = tuple[AuditName, Actor, str, dict[str, Any]]
_EVENTS = {
    "added": AuditName.KNOWLEDGE_DOCUMENT_ADDED,
    "replaced": AuditName.KNOWLEDGE_DOCUMENT_REPLACED,
    "updated": AuditName.KNOWLEDGE_DOCUMENT_UPDATED,
}


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
        reader: FileReader | None = None,
    ) -> None:
        self.engine = engine
        self.audit = audit
        self.audit_engine = audit_engine
        self.limits = limits or Limits()
        self.embedder = embedder
        # A file's text is read by `reader.read` before the database work (a route) or, for
        # a file's bytes given to `add`, by `reader.read_blocking` (the CLI; never in run_db).
        self.reader = reader or FileReader(
            max_file_bytes=self.limits.max_file_bytes, max_text_bytes=self.limits.max_document_bytes
        )

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
        (hybrid with an embedding endpoint, else text). `approximate`: more than
        RANKED_CANDIDATES chunks matched, and only the newest of them were ranked."""
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
            every = {c.name: c for c, *_ in ks.collections(s, project_id)}
            for name in names or ():
                if check_name(name) not in every:
                    raise NotFound(f"collection {name!r} not found")
            searched = (
                list(every.values()) if names is None else [every[name] for name in dict.fromkeys(names)]
            )
            # The collections of each language searched; None where that is all of them (no filter).
            groups: dict[str, list[int]] = {}
            for c in searched:
                if c.id is not None:
                    groups.setdefault(c.language, []).append(c.id)
            by_language: dict[str, list[int] | None] = {
                language: None if len(chosen) == len(every) else chosen for language, chosen in groups.items()
            }
            ids = None if len(searched) == len(every) else [c.id for c in searched if c.id is not None]
            try:
                parsed = {
                    lang: kt.parse_query(query, lang) for lang in by_language or {kt.DEFAULT_LANGUAGE: None}
                }
            except kt.QueryRefused as exc:
                raise KnowledgeRefused(str(exc)) from None
            text_hits: list[ks.Match] = []
            approximate = False
            if used != "vector":
                pool = size if used == "text" else max(size * 3, 30)
                for lang, q in parsed.items():
                    chosen = by_language.get(lang)
                    floor = ks.candidate_floor(
                        s, project_id, q, collection_ids=chosen, filters=filters, cap=RANKED_CANDIDATES
                    )
                    approximate = approximate or floor is not None
                    text_hits += ks.search(
                        s, project_id, q, collection_ids=chosen, filters=filters, limit=pool, floor=floor
                    )
                text_hits.sort(key=lambda m: (-m.score, m.chunk_id))
            vector_hits: list[ks.Match] = []
            if used in ("vector", "hybrid"):
                vector_hits = self._vector_search(s, project_id, query, ids, filters, max(size * 3, 30))
        hits = _fuse(text_hits, vector_hits, size) if used == "hybrid" else (text_hits or vector_hits)[:size]
        return {"mode": used, "approximate": approximate, "hits": [self._hit(m, parsed) for m in hits]}

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
        with self._writing(project_id) as (s, events):
            row = ks.collection(s, project_id, name)
            created = row is None
            if row is None:
                self._new_collection(s, project_id, name, lang)
                events.append((AuditName.KNOWLEDGE_COLLECTION_CREATED, actor, name, {"language": lang}))
            elif language is not None and row.language != lang:
                raise KnowledgeRefused(f"collection {name!r} exists with language {row.language!r}")
        return {**self.collection(project_id, name), "created": created}

    def remove_collection(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        check_name(name)
        with self._writing(project_id) as (s, events):
            row = ks.collection(s, project_id, name)
            if row is None:
                raise NotFound(f"collection {name!r} not found")
            removed = ks.remove_collection(s, row)
            events.append((AuditName.KNOWLEDGE_COLLECTION_REMOVED, actor, name, {"documents": removed}))
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
        file: FileText | None = None,
    ) -> dict[str, Any]:
        """Add a document from `text`, or from a file (`file_name` + `data`, or `file` read
        already by `self.reader.read`). Without `doc_id`
        its id comes from its collection and text, so the same text added again changes
        nothing; with one, a different text replaces the document's chunks at once. Returns
        the document and `status`: added, replaced, updated (title or metadata only) or
        unchanged."""
        item = NewDocument(collection, text, file_name, data, doc_id, title, metadata, file=file)
        return self.add_many(project_id, [item], actor=actor)[0]

    def add_many(self, project_id: str, items: list[NewDocument], *, actor: Actor) -> list[dict[str, Any]]:
        """Several documents in one transaction: all are written or none (the first refusal
        is raised, naming its document's position when there are several)."""
        languages: dict[str, str] = {}
        prepared: list[_Prepared] = []
        for number, item in enumerate(items, start=1):
            try:
                check_name(item.collection)
                if item.collection not in languages:
                    languages[item.collection] = self._collection_language(project_id, item.collection)
                prepared.append(self._prepare(item, languages[item.collection]))
            except KnowledgeRefused as exc:
                message = exc.message if len(items) == 1 else f"document {number}: {exc.message}"
                raise KnowledgeRefused(message) from None
        with self._writing(project_id) as (s, events):
            batch = _Batch(s, project_id, [p.doc_id for p in prepared])
            done = [self._write(batch, events, actor, p) for p in prepared]
            batch.count()
        return done

    def _collection_language(self, project_id: str, name: str) -> str:
        with Session(self.engine) as s:
            row = ks.collection(s, project_id, name)
        return row.language if row is not None else kt.DEFAULT_LANGUAGE

    def _prepare(self, item: NewDocument, language: str) -> _Prepared:
        """Everything about a document that needs no database: its text, id, title, chunks,
        stems and embeddings."""
        if item.doc_id is not None:
            check_doc_id(item.doc_id)
        meta = check_metadata(item.metadata)
        source, body, found_title = self._text(item.text, item.file_name, item.data, item.file)
        file_name = item.file.name if item.file is not None else item.file_name
        if item.source is not None and item.data is None and item.file is None:
            if not isinstance(item.source, str) or not 0 < len(item.source) <= 300:
                raise KnowledgeRefused("a document's source is a string of 1-300 characters")
            source = item.source
        doc_id = item.doc_id or "d-" + hashlib.sha256(f"{item.collection}\n{body}".encode()).hexdigest()[:24]
        first_line = body.strip().split("\n", 1)[0].strip()
        title = check_title(item.title if item.title else found_title, file_name or first_line or doc_id)
        pieces = [
            ks.ChunkRow(a, b, body[a:b], kt.terms(body[a:b], language)) for a, b in kt.chunk_spans(body)
        ]
        return _Prepared(
            collection=item.collection,
            language=language,
            doc_id=doc_id,
            title=title,
            meta=meta,
            pairs=meta_pairs(meta),
            source=source,
            digest=hashlib.sha256(body.encode()).hexdigest(),
            size=len(body.encode()),
            pieces=self._embedded(pieces),
        )

    def _write(self, batch: _Batch, events: list[_Event], actor: Actor, p: _Prepared) -> dict[str, Any]:
        s, project_id = batch.s, batch.project_id
        coll = batch.collection(p.collection)
        if coll is None:
            coll = batch.colls[p.collection] = self._new_collection(s, project_id, p.collection, p.language)
            events.append(
                (AuditName.KNOWLEDGE_COLLECTION_CREATED, actor, p.collection, {"language": p.language})
            )
        elif coll.language != p.language:  # made with another language in between: stem again
            raise KnowledgeRefused(f"collection {p.collection!r} changed while adding; add again")
        assert coll.id is not None
        row = batch.docs.get(p.doc_id)
        if row is not None and row.collection_id != coll.id:
            other = s.get(KnowledgeCollection, row.collection_id)
            where = other.name if other else "?"
            raise KnowledgeRefused(f"document {p.doc_id!r} is in collection {where!r}; remove it there first")
        if row is not None and row.digest == p.digest:
            if row.title == p.title and row.meta == p.meta:
                return {**document_view(row, p.collection), "status": "unchanged"}
            assert row.id is not None
            row.title, row.meta, row.updated_at = p.title, p.meta, utcnow()
            s.add(row)
            s.flush()
            ks.set_meta(s, row, p.pairs)
            status = "updated"
        else:
            self._check_caps(batch.usage, row, p.size, len(p.pieces))
            created_at = row.created_at if row is not None else utcnow()
            if row is not None:
                ks.remove_document(s, row)
                batch.counted(row, -1)
            status = "replaced" if row is not None else "added"
            row = KnowledgeDocument(
                project_id=project_id,
                collection_id=coll.id,
                doc_id=p.doc_id,
                title=p.title,
                meta=p.meta,
                source=p.source,
                digest=p.digest,
                size=p.size,
                chunks=len(p.pieces),
                created_at=created_at,
            )
            ks.add_document(s, row, p.pieces, p.pairs)
            batch.counted(row, 1)
            batch.docs[p.doc_id] = row
        details = {"collection": p.collection, "document": p.doc_id, "bytes": p.size, "chunks": len(p.pieces)}
        events.append((_EVENTS[status], actor, p.doc_id, details))
        return {**document_view(row, p.collection), "status": status}

    def remove(self, project_id: str, doc_id: str, *, actor: Actor) -> bool:
        check_doc_id(doc_id)
        with self._writing(project_id) as (s, events):
            row = ks.document(s, project_id, doc_id)
            if row is None:
                return False
            coll = s.get(KnowledgeCollection, row.collection_id)
            ks.remove_document(s, row)
            ks.count(s, row.collection_id, -1, -row.chunks, -row.size)
            details = {"collection": coll.name if coll else None, "document": doc_id}
            events.append((AuditName.KNOWLEDGE_DOCUMENT_REMOVED, actor, doc_id, details))
        return True

    def import_lines(self, project_id: str, lines: Iterable[Any], *, actor: Actor) -> dict[str, Any]:
        """Apply an export: collections are created, documents added or replaced by id, in
        transactions of IMPORT_BATCH documents. Stops at the first line it cannot use, naming
        it; what came before it stays."""
        counts = {"collections": 0, "added": 0, "replaced": 0, "updated": 0, "unchanged": 0}
        batch: list[tuple[int, NewDocument]] = []
        seen: set[str] = set()  # the collection lines already applied

        def flush() -> None:
            try:
                done = self.add_many(project_id, [item for _, item in batch], actor=actor)
            except (KnowledgeRefused, KnowledgeFull):
                done = []
                for number, item in batch:  # again one by one: the lines before the bad one stay
                    try:
                        done.append(self.add_many(project_id, [item], actor=actor)[0])
                    except (KnowledgeRefused, KnowledgeFull) as exc:
                        raise type(exc)(f"line {number}: {exc.message}", **_cap_args(exc)) from None
            for view in done:
                counts[view["status"]] += 1
            batch.clear()

        for number, line in enumerate(lines, start=1):
            where = f"line {number}"
            shaped = isinstance(line, dict) and line.get("type") in ("collection", "document")
            again = repr((line.get("name"), line.get("language"))) if shaped else ""
            if shaped and line["type"] == "collection" and again in seen:
                continue  # applied already: a transaction (and a flush) per such line would let
                # a body of repeated short lines hold the write lock for many minutes
            if batch and (
                not shaped or line["type"] == "collection" or not isinstance(line.get("text"), str)
            ):
                flush()  # what came before this line is written first
            if not shaped:
                raise KnowledgeRefused(f'{where}: expected an object with "type": "collection" or "document"')
            if line["type"] == "collection":
                try:
                    made = self.create_collection(
                        project_id, check_name(line.get("name")), language=line.get("language"), actor=actor
                    )
                except (KnowledgeRefused, KnowledgeFull) as exc:
                    raise type(exc)(f"{where}: {exc.message}", **_cap_args(exc)) from None
                counts["collections"] += int(made["created"])
                seen.add(again)
                continue
            if not isinstance(line.get("text"), str):
                raise KnowledgeRefused(f'{where}: a document needs its "text"')
            item = NewDocument(
                cast(str, line.get("collection")),  # checked with the rest of the document
                text=line["text"],
                doc_id=line.get("id"),
                title=line.get("title"),
                metadata=line.get("metadata"),
                source=line.get("source"),
            )
            batch.append((number, item))
            if len(batch) >= IMPORT_BATCH:
                flush()
        if batch:
            flush()
        return counts

    # ------------------------------------------------------------------ helpers

    def _language(self, language: Any) -> str:
        if language is not None and not isinstance(language, str):
            raise KnowledgeRefused("the language must be a string")
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
        self, text: str | None, file_name: str | None, data: bytes | None, file: FileText | None = None
    ) -> tuple[str, str, str | None]:
        """(source, text, title found in the file)."""
        limits = self.limits
        if [text, data, file].count(None) != 2:
            raise KnowledgeRefused("give a document's text or a file, not both")
        if file is not None:
            body, found_title, source = file.text, file.title, file.name
        elif data is not None:
            read = self.reader.read_blocking(file_name or "upload", data)
            body, found_title, source = read.text, read.title, read.name
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

    def _check_caps(self, used: ks.Usage, replaced: KnowledgeDocument | None, size: int, chunks: int) -> None:
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

    @contextlib.contextmanager
    def _writing(self, project_id: str) -> Iterator[tuple[Session, list[_Event]]]:
        """One write transaction of the project's knowledge base and the audit events it
        collects: they commit with it when the knowledge base lives in the main store, else
        right after it (nothing is recorded for a write that did not commit)."""
        events: list[_Event] = []
        together = self.engine is self.audit_engine
        with Session(self.engine) as s:
            ks.begin_write(s, project_id)
            yield s, events
            if together:
                for event, actor, target, details in events:
                    self.audit.record(s, event, **_fields(project_id, actor, target, details))
            s.commit()
        if not together:
            for event, actor, target, details in events:
                self.audit.record_alone(
                    self.audit_engine, event, **_fields(project_id, actor, target, details)
                )


class _Batch:
    """What one write transaction of several documents reads once: its collections, the
    documents it may replace, the project's usage (kept up to date in memory) and the
    changes of each collection's counts (written at the end)."""

    def __init__(self, s: Session, project_id: str, doc_ids: list[str]) -> None:
        self.s = s
        self.project_id = project_id
        self.colls: dict[str, KnowledgeCollection | None] = {}
        self.docs = ks.documents_by_id(s, project_id, doc_ids)
        used = ks.usage(s, project_id)
        self.usage = ks.Usage(used.documents, used.size, used.chunks)
        self._deltas: dict[int, list[int]] = {}

    def collection(self, name: str) -> KnowledgeCollection | None:
        if name not in self.colls:
            self.colls[name] = ks.collection(self.s, self.project_id, name)
        return self.colls[name]

    def counted(self, row: KnowledgeDocument, sign: int) -> None:
        delta = self._deltas.setdefault(row.collection_id, [0, 0, 0])
        delta[0] += sign
        delta[1] += sign * row.chunks
        delta[2] += sign * row.size
        self.usage = ks.Usage(
            self.usage.documents + sign,
            self.usage.size + sign * row.size,
            self.usage.chunks + sign * row.chunks,
        )

    def count(self) -> None:
        for collection_id, (documents, chunks, size) in self._deltas.items():
            ks.count(self.s, collection_id, documents, chunks, size)


def _fields(project_id: str, actor: Actor, target: str, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "actor": actor.actor,
        "project_id": project_id,
        "target": target,
        "source": actor.source,
        "run_id": actor.run_id,
        "client_address": actor.client_address,
        "user_agent": actor.user_agent,
        "details": details,
    }


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
