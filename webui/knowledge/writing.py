"""Writing a project's knowledge base: documents read, checked and chunked (`prepare`),
then written with their chunks, index and metadata rows in one transaction (`write_many`)
within the project's caps, with the audit events the transaction collects (`writing`)."""

from __future__ import annotations

import contextlib
import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.errors import KnowledgeFull, KnowledgeRefused
from webui.knowledge import text as kt
from webui.knowledge.model import (
    Actor,
    Limits,
    check_doc_id,
    check_metadata,
    check_name,
    check_title,
    meta_pairs,
)
from webui.knowledge.reader import FileReader, FileText
from webui.store import knowledge as ks
from webui.store.models import KnowledgeCollection, KnowledgeDocument, as_utc, utcnow


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
class Prepared:
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

    @property
    def vector_bytes(self) -> int:
        return sum(len(p.vector) for p in self.pieces if p.vector is not None)


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
        "vectorBytes": row.vector_bytes,
        "createdAt": as_utc(row.created_at).isoformat(),
    }


class KnowledgeWrites:
    """The write side of `KnowledgeService` (`engine`, `audit_engine`: as there)."""

    def __init__(
        self, engine: Engine, *, audit: AuditLog, audit_engine: Engine, limits: Limits, reader: FileReader
    ) -> None:
        self.engine = engine
        self.audit = audit
        self.audit_engine = audit_engine
        self.limits = limits
        self.reader = reader

    def prepare_many(self, project_id: str, items: list[NewDocument]) -> list[Prepared]:
        """Each document read, checked and chunked (no embeddings yet, nothing written)."""
        languages: dict[str, str] = {}
        prepared: list[Prepared] = []
        for number, item in enumerate(items, start=1):
            try:
                check_name(item.collection)
                if item.collection not in languages:
                    languages[item.collection] = self.collection_language(project_id, item.collection)
                prepared.append(self.prepare(item, languages[item.collection]))
            except KnowledgeRefused as exc:
                message = exc.message if len(items) == 1 else f"document {number}: {exc.message}"
                raise KnowledgeRefused(message) from None
        return prepared

    def write_many(self, project_id: str, prepared: list[Prepared], *, actor: Actor) -> list[dict[str, Any]]:
        """The documents prepared (and embedded), written in one transaction."""
        with self.writing(project_id) as (s, events):
            batch = Batch(s, project_id, [p.doc_id for p in prepared])
            done = [self.write(batch, events, actor, p) for p in prepared]
            batch.count()
        return done

    def collection_language(self, project_id: str, name: str) -> str:
        with Session(self.engine) as s:
            row = ks.collection(s, project_id, name)
        return row.language if row is not None else kt.DEFAULT_LANGUAGE

    def prepare(self, item: NewDocument, language: str) -> Prepared:
        """Everything about a document that needs no database: its text, id, title, chunks,
        stems and embeddings."""
        if item.doc_id is not None:
            check_doc_id(item.doc_id)
        meta = check_metadata(item.metadata)
        source, body, found_title = self.text(item.text, item.file_name, item.data, item.file)
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
        return Prepared(
            collection=item.collection,
            language=language,
            doc_id=doc_id,
            title=title,
            meta=meta,
            pairs=meta_pairs(meta),
            source=source,
            digest=hashlib.sha256(body.encode()).hexdigest(),
            size=len(body.encode()),
            pieces=pieces,
        )

    def write(self, batch: Batch, events: list[_Event], actor: Actor, p: Prepared) -> dict[str, Any]:
        s, project_id = batch.s, batch.project_id
        coll = batch.collection(p.collection)
        if coll is None:
            coll = batch.colls[p.collection] = self.new_collection(s, project_id, p.collection, p.language)
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
            if other is not None and other.removing:
                raise KnowledgeRefused(
                    f"document {p.doc_id!r} is in collection {where!r}, which is being removed;"
                    " add it again once that is done"
                )
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
            old_vectors = ks.vector_bytes(s, row.id) if row is not None and row.id is not None else 0
            self.check_caps(batch.usage, row, old_vectors, p)
            created_at = row.created_at if row is not None else utcnow()
            if row is not None:
                ks.remove_document(s, row)
                batch.counted(row, -1, old_vectors)
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
            batch.counted(row, 1, p.vector_bytes)
            batch.docs[p.doc_id] = row
        details = {"collection": p.collection, "document": p.doc_id, "bytes": p.size, "chunks": len(p.pieces)}
        events.append((_EVENTS[status], actor, p.doc_id, details))
        return {**document_view(row, p.collection), "status": status}

    def language(self, language: Any) -> str:
        if language is not None and not isinstance(language, str):
            raise KnowledgeRefused("the language must be a string")
        try:
            return kt.check_language(language or kt.DEFAULT_LANGUAGE)
        except ValueError as exc:
            raise KnowledgeRefused(str(exc)) from None

    def new_collection(self, s: Session, project_id: str, name: str, language: str) -> KnowledgeCollection:
        cap = self.limits.max_collections
        if cap and len(ks.collections(s, project_id)) >= cap:
            raise KnowledgeFull(f"the project's knowledge base holds {cap} collections already", limit=cap)
        return ks.add_collection(s, project_id, name, language)

    def text(
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

    def check_caps(
        self, used: ks.Usage, replaced: KnowledgeDocument | None, replaced_vectors: int, p: Prepared
    ) -> None:
        """The project's caps, with `p` in place of `replaced`: bytes count the text's and
        the stored vectors'."""
        docs = used.documents + (0 if replaced else 1)
        total = used.size + used.vector_bytes + p.size + p.vector_bytes
        total -= (replaced.size + replaced_vectors) if replaced else 0
        pieces = used.chunks + len(p.pieces) - (replaced.chunks if replaced else 0)
        limits = self.limits
        for cap, value, what in (
            (limits.max_documents, docs, "documents"),
            (limits.max_bytes, total, "bytes (text and vectors)"),
            (limits.max_chunks, pieces, "chunks"),
        ):
            if cap and value > cap:
                raise KnowledgeFull(f"the project's knowledge base may hold at most {cap} {what}", limit=cap)

    @contextlib.contextmanager
    def writing(self, project_id: str) -> Iterator[tuple[Session, list[_Event]]]:
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
                    self.audit.record(s, event, **audit_fields(project_id, actor, target, details))
            s.commit()
        if not together:
            for event, actor, target, details in events:
                self.audit.record_alone(
                    self.audit_engine, event, **audit_fields(project_id, actor, target, details)
                )


class Batch:
    """What one write transaction of several documents reads once: its collections, the
    documents it may replace, the project's usage (kept up to date in memory) and the
    changes of each collection's counts (written at the end)."""

    def __init__(self, s: Session, project_id: str, doc_ids: list[str]) -> None:
        self.s = s
        self.project_id = project_id
        self.colls: dict[str, KnowledgeCollection | None] = {}
        self.docs = ks.documents_by_id(s, project_id, doc_ids)
        self.usage = ks.usage(s, project_id)
        self._deltas: dict[int, list[int]] = {}

    def collection(self, name: str) -> KnowledgeCollection | None:
        if name not in self.colls:
            row = ks.collection_row(self.s, self.project_id, name)
            if row is not None and row.removing:
                raise KnowledgeRefused(
                    f"collection {name!r} is being removed; add to it again once that is done"
                )
            self.colls[name] = row
        return self.colls[name]

    def counted(self, row: KnowledgeDocument, sign: int, vectors: int) -> None:
        delta = self._deltas.setdefault(row.collection_id, [0, 0, 0, 0])
        delta[0] += sign
        delta[1] += sign * row.chunks
        delta[2] += sign * row.size
        delta[3] += sign * vectors
        self.usage = ks.Usage(
            self.usage.documents + sign,
            self.usage.size + sign * row.size,
            self.usage.chunks + sign * row.chunks,
            self.usage.vector_bytes + sign * vectors,
        )

    def count(self) -> None:
        for collection_id, (documents, chunks, size, vectors) in self._deltas.items():
            ks.count(self.s, collection_id, documents, chunks, size, vectors)


def audit_fields(project_id: str, actor: Actor, target: str, details: dict[str, Any]) -> dict[str, Any]:
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


def cap_args(exc: Exception) -> dict[str, Any]:
    return {"limit": exc.limit} if isinstance(exc, KnowledgeFull) else {}


def pack_vector(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def chunk_texts(prepared: list[Prepared]) -> list[str]:
    return [p.body for item in prepared for p in item.pieces]


def with_vectors(prepared: list[Prepared], vectors: list[list[float]]) -> list[Prepared]:
    """The documents with their chunks' embeddings (in the order of `_texts`)."""
    left = iter(vectors)
    out = [
        replace(
            item,
            pieces=[
                ks.ChunkRow(p.start, p.end, p.body, p.terms, pack_vector(next(left))) for p in item.pieces
            ],
        )
        for item in prepared
    ]
    if next(left, None) is not None:
        raise ValueError("more embeddings than texts")
    return out
