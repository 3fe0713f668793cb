"""The knowledge base of each project: named collections of documents, split into chunks and
indexed for ranked full-text search (webui.store.knowledge), with optional vector search where
an embedding endpoint is configured (webui.knowledge.embeddings).

The plain methods block: the command line calls them as they are, the server through
`run_db`, and those never call the network. The `async` ones are what the server calls (a
route, a handler's `ctx.knowledge`): each runs its database work in short `run_db` steps
(`run`) and the embeddings endpoint between them, never inside a database thread or session,
within the account's allowance (webui.knowledge.gates); a search and an export also hold one
of the account's read slots.

Writes are one transaction each: a document is added or replaced with all its chunks, index
rows and metadata rows, or not at all, and the caps of its project (its vectors' bytes
counted with its text's) are counted in that transaction. A collection is removed in steps:
marked (hidden from every read and write from then on, and audited once), then its
documents deleted a bounded batch a transaction with a pause between them (a waiting writer
gets its turn), then its row; a removal cut short (a crash, a shutdown) is finished at the
next start or by removing it again. Each write is audited; the event commits with the change
when the knowledge base lives in the main store, else right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, ParamSpec, TypeVar, cast

import anyio
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import DatabaseBusy, TaskSet, run_db
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound
from webui.knowledge import text as kt
from webui.knowledge.embeddings import Embedder, batches
from webui.knowledge.gates import EmbeddingsGate, ReadSlots
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
# An export reads at most this many documents, or (at least one) about this much text, a step.
EXPORT_BATCH_DOCUMENTS = 100
EXPORT_BATCH_BYTES = 4 * 1024 * 1024
# A removal deletes at most this many chunks (and documents) a transaction, then pauses as
# long as the step took (at least REMOVE_PAUSE_SECONDS, at most 1 s): a writer waiting for
# the database's lock gets it between two steps.
REMOVE_CHUNKS = 250
REMOVE_DOCUMENTS = 500
REMOVE_PAUSE_SECONDS = 0.05
REMOVE_BUSY_RETRIES = 5  # a step that finds the database busy is tried again this often
DEFAULT_READS_PER_ACCOUNT = 4
log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
# Runs a blocking step in a database thread: `run_db`, or a run's own writer (retried while busy).
Runner = Callable[..., Awaitable[Any]]


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

    @property
    def vector_bytes(self) -> int:
        return sum(len(p.vector) for p in self.pieces if p.vector is not None)


class ExportCursor(NamedTuple):
    """Where an export goes on: in `collection` (its line `started` already), after the
    document `after` (None: from its first)."""

    collection: str
    after: str | None
    started: bool


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
        gate: EmbeddingsGate | None = None,
        reads: ReadSlots | None = None,
    ) -> None:
        self.engine = engine
        self.audit = audit
        self.audit_engine = audit_engine
        self.limits = limits or Limits()
        self.embedder = embedder
        self.gate = gate or EmbeddingsGate()  # the embeddings endpoint's allowance
        self.reads = reads or ReadSlots(DEFAULT_READS_PER_ACCOUNT)  # searches and exports at once
        self._tasks = TaskSet()  # collection removals, finished even when their request is not
        self._removals: dict[int, asyncio.Task[None]] = {}
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
        RANKED_CANDIDATES chunks matched, and only the newest of them were ranked.

        Blocking, the query's embedding included: the command line's (the server's is
        `search_async`)."""
        used = self._search_mode(query, mode)
        vector = None
        if used in ("vector", "hybrid"):
            assert self.embedder is not None
            [vector] = self.embedder.embed([query])
        return self.search_embedded(
            project_id, query, collection=collection, filter=filter, limit=limit, mode=used, vector=vector
        )

    async def search_async(
        self,
        project_id: str,
        query: str,
        *,
        account: str,
        collection: str | list[str] | None = None,
        filter: Any = None,
        limit: int | None = None,
        mode: str = "auto",
        run: Runner = run_db,
    ) -> dict[str, Any]:
        """`search`, holding one of the account's read slots (else `too_many_reads`): the
        query is embedded first (within the account's allowance), then searched in one
        database step."""
        with self.reads.holding(account):
            used = self._search_mode(query, mode)
            vector = None
            if used in ("vector", "hybrid"):
                if not query.strip():
                    raise KnowledgeRefused("the query has no words to search for")
                [vector] = await self._embed(account, [query])
            return await run(
                self.search_embedded,
                project_id,
                query,
                collection=collection,
                filter=filter,
                limit=limit,
                mode=used,
                vector=vector,
            )

    def _search_mode(self, query: Any, mode: Any) -> str:
        """The mode a search runs in (`auto` chosen), once its query and mode are checked."""
        if not isinstance(query, str):
            raise KnowledgeRefused("the query must be a string")
        if len(query) > kt.MAX_QUERY_CHARS:
            raise KnowledgeRefused(f"the query is longer than {kt.MAX_QUERY_CHARS} characters")
        if mode not in ("auto", "text", "vector", "hybrid"):
            raise KnowledgeRefused("mode must be auto, text, vector or hybrid")
        if mode in ("vector", "hybrid") and self.embedder is None:
            raise KnowledgeRefused(f"{mode} search needs an embedding endpoint (STEAMHARNESS_EMBEDDINGS_URL)")
        return ("hybrid" if self.embedder is not None else "text") if mode == "auto" else mode

    def search_embedded(
        self,
        project_id: str,
        query: str,
        *,
        collection: str | list[str] | None = None,
        filter: Any = None,
        limit: int | None = None,
        mode: str = "auto",
        vector: list[float] | None = None,
    ) -> dict[str, Any]:
        """`search` with the query's embedding given (`vector`, for the vector and hybrid
        modes): blocking, and no network call."""
        used = self._search_mode(query, mode)
        if used in ("vector", "hybrid") and vector is None:
            raise ValueError("a vector or hybrid search needs the query's embedding")
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
            # "All of the project's chunks" is a cheaper scope, but holds a collection being removed.
            whole = not ks.removing(s, project_id)
            # The collections of each language searched; None where that is all of them (no filter).
            groups: dict[str, list[int]] = {}
            for c in searched:
                if c.id is not None:
                    groups.setdefault(c.language, []).append(c.id)
            by_language: dict[str, list[int] | None] = {
                language: None if whole and len(chosen) == len(every) else chosen
                for language, chosen in groups.items()
            }
            ids = (
                None
                if whole and len(searched) == len(every)
                else [c.id for c in searched if c.id is not None]
            )
            try:
                parsed = {
                    lang: kt.parse_query(query, lang) for lang in by_language or {kt.DEFAULT_LANGUAGE: None}
                }
            except kt.QueryRefused as exc:
                raise KnowledgeRefused(str(exc)) from None
            text_hits: list[ks.Match] = []
            approximate = False
            if searched and used != "vector":  # no collection: nothing to search in
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
            if searched and vector is not None and used in ("vector", "hybrid"):
                vector_hits = self._vector_search(s, project_id, vector, ids, filters, max(size * 3, 30))
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
        self, s: Session, project_id: str, wanted: list[float], ids: list[int] | None, filters: Any, pool: int
    ) -> list[ks.Match]:
        """The chunks nearest to the query's embedding (`wanted`) by cosine, compared in
        batches (at most VECTOR_SCAN_CAP chunks; memory stays one batch)."""
        import numpy as np

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
        """JSON lines: each collection, then each of its documents with its text. Read a
        batch a transaction (`export_batch`): no read stays open while the lines are used."""
        cursor: ExportCursor | None = None
        while True:
            lines, cursor = self.export_batch(project_id, collection, cursor)
            yield from lines
            if cursor is None:
                return

    def export_counts(self, project_id: str, collection: str | None = None) -> dict[str, int]:
        """What an export starting now holds (its audit's counts); `NotFound` for an unknown
        collection."""
        views = self.collections(project_id)
        if collection is not None:
            views = [v for v in views if v["name"] == collection]
            if not views:
                raise NotFound(f"collection {collection!r} not found")
        return {"collections": len(views), "documents": sum(v["documents"] for v in views)}

    def export_batch(
        self, project_id: str, collection: str | None, cursor: ExportCursor | None
    ) -> tuple[list[dict[str, Any]], ExportCursor | None]:
        """The export's next lines from `cursor` (None: its start), read in one short
        transaction: at most EXPORT_BATCH_DOCUMENTS documents, and no more once about
        EXPORT_BATCH_BYTES of text are in (at least one document); and where it goes on
        (None: done). Collections by name, documents by id: a document added or removed
        meanwhile is in the export or not by where it falls."""
        lines: list[dict[str, Any]] = []
        room, held = EXPORT_BATCH_DOCUMENTS, 0
        with Session(self.engine) as s:
            for coll, *_ in ks.collections(s, project_id):
                if collection is not None and coll.name != collection:
                    continue
                if cursor is not None and coll.name < cursor.collection:
                    continue
                assert coll.id is not None
                going_on = cursor is not None and coll.name == cursor.collection and cursor.started
                if not room or held >= EXPORT_BATCH_BYTES:
                    return lines, ExportCursor(coll.name, None, False)
                after = cursor.after if going_on and cursor is not None else None
                if not going_on:
                    lines.append({"type": "collection", "name": coll.name, "language": coll.language})
                rows = ks.collection_documents(s, coll.id, after=after, limit=room)
                taken: list[KnowledgeDocument] = []
                for row in rows:
                    if held >= EXPORT_BATCH_BYTES:
                        break
                    taken.append(row)
                    held += row.size
                bodies = ks.texts(s, [row.id for row in taken if row.id is not None])
                lines += [
                    {
                        "type": "document",
                        "collection": coll.name,
                        "id": row.doc_id,
                        "title": row.title,
                        "metadata": row.meta,
                        "source": row.source,
                        "text": bodies.get(row.id or 0, ""),
                    }
                    for row in taken
                ]
                room -= len(taken)
                if len(taken) < len(rows) or (rows and not room):
                    return lines, ExportCursor(coll.name, taken[-1].doc_id, True)
        return lines, None

    # ------------------------------------------------------------------ writes

    def create_collection(
        self, project_id: str, name: str, *, language: str | None = None, actor: Actor
    ) -> dict[str, Any]:
        """The collection (created when new; the same language again changes nothing)."""
        check_name(name)
        lang = self._language(language)
        with self._writing(project_id) as (s, events):
            row = ks.collection_row(s, project_id, name)
            if row is not None and row.removing:
                raise KnowledgeRefused(
                    f"collection {name!r} is being removed; create it again once that is done"
                )
            created = row is None
            if row is None:
                self._new_collection(s, project_id, name, lang)
                events.append((AuditName.KNOWLEDGE_COLLECTION_CREATED, actor, name, {"language": lang}))
            elif language is not None and row.language != lang:
                raise KnowledgeRefused(f"collection {name!r} exists with language {row.language!r}")
        return {**self.collection(project_id, name), "created": created}

    def remove_collection(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        """Remove the collection and its documents (blocking: the command line's; the
        server's is `remove_collection_async`), in short transactions."""
        collection_id, documents = self.begin_removal(project_id, name, actor=actor)
        while True:
            started = time.monotonic()
            if self.remove_step(project_id, collection_id):
                return {"name": name, "removedDocuments": documents}
            time.sleep(_pause(time.monotonic() - started))

    async def remove_collection_async(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        """Remove the collection: marked at once, then emptied by a task of this service,
        which goes on if the caller leaves; returns once it is gone."""
        collection_id, documents = await run_db(self.begin_removal, project_id, name, actor=actor)
        await asyncio.shield(self._removal(project_id, collection_id))
        return {"name": name, "removedDocuments": documents}

    def begin_removal(self, project_id: str, name: str, *, actor: Actor) -> tuple[int, int]:
        """Mark the collection as being removed (audited, once): from now on it is hidden
        from every read and write. Returns its row id and its documents. One marked already
        (a removal cut short, or still under way) is returned as it is."""
        check_name(name)
        with self._writing(project_id) as (s, events):
            row = ks.collection_row(s, project_id, name)
            if row is None:
                raise NotFound(f"collection {name!r} not found")
            assert row.id is not None
            if not row.removing:
                ks.mark_removing(s, row)
                events.append(
                    (AuditName.KNOWLEDGE_COLLECTION_REMOVED, actor, name, {"documents": row.documents})
                )
            return row.id, row.documents

    def remove_step(self, project_id: str, collection_id: int) -> bool:
        """One short transaction of a removal (webui.store.knowledge.remove_batch); True once
        the collection is gone."""
        with self._writing(project_id) as (s, _events):
            _, done = ks.remove_batch(s, collection_id, chunks=REMOVE_CHUNKS, documents=REMOVE_DOCUMENTS)
        return done

    def _removal(self, project_id: str, collection_id: int) -> asyncio.Task[None]:
        """The task emptying the collection: the one under way, or a new one."""
        task = self._removals.get(collection_id)
        if task is None or task.done():
            task = self._tasks.spawn(
                self._remove_all(project_id, collection_id), name=f"knowledge removal {collection_id}"
            )
            self._removals[collection_id] = task
        return task

    async def _remove_all(self, project_id: str, collection_id: int) -> None:
        try:
            busy = 0
            while True:
                started = time.monotonic()
                try:
                    if await run_db(self.remove_step, project_id, collection_id):
                        return
                except DatabaseBusy:
                    busy += 1
                    if busy > REMOVE_BUSY_RETRIES:
                        raise
                    log.warning("knowledge removal %s: database busy, trying again", collection_id)
                await anyio.sleep(_pause(time.monotonic() - started))
        finally:
            if self._removals.get(collection_id) is asyncio.current_task():
                del self._removals[collection_id]

    async def resume_removals(self) -> None:
        """Finish the removals a stop cut short (the collections still marked)."""

        def marked() -> list[tuple[str, int]]:
            with Session(self.engine) as s:
                return [(row.project_id, row.id) for row in ks.removing(s) if row.id is not None]

        for project_id, collection_id in await run_db(marked):
            try:
                await asyncio.shield(self._removal(project_id, collection_id))
            except Exception:
                log.exception(
                    "knowledge removal %s: not finished; it is tried again at the next start", collection_id
                )

    async def close(self) -> None:
        """Stop the removals under way (each goes on at the next start)."""
        await self._tasks.cancel_all()

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
        is raised, naming its document's position when there are several). Blocking, the
        embeddings included: the command line's (the server's is `add_many_async`)."""
        return _drive(self._add_steps(project_id, items, actor=actor), self._embed_blocking)

    async def add_many_async(
        self, project_id: str, items: list[NewDocument], *, actor: Actor, account: str, run: Runner = run_db
    ) -> list[dict[str, Any]]:
        """`add_many`: read and chunked in one database step, embedded (within the account's
        allowance) outside any, written in another."""
        prepared = await run(self.prepare_many, project_id, items)
        texts = _texts(prepared)
        if self.embedder is not None and texts:
            prepared = _with_vectors(prepared, await self._embed(account, texts))
        return await run(self.write_many, project_id, prepared, actor=actor)

    async def add_async(
        self,
        project_id: str,
        collection: str,
        *,
        actor: Actor,
        account: str,
        text: str | None = None,
        file: FileText | None = None,
        doc_id: str | None = None,
        title: str | None = None,
        metadata: Any = None,
        run: Runner = run_db,
    ) -> dict[str, Any]:
        """`add` of a text, or of a file read already (`self.reader.read`), for the server."""
        item = NewDocument(collection, text, None, None, doc_id, title, metadata, file=file)
        return (await self.add_many_async(project_id, [item], actor=actor, account=account, run=run))[0]

    def _add_steps(
        self, project_id: str, items: list[NewDocument], *, actor: Actor
    ) -> Generator[list[str], list[list[float]], list[dict[str, Any]]]:
        """`add_many` as steps: yields the texts to embed (when there is an endpoint) and is
        sent their embeddings; holds no session across a yield."""
        prepared = self.prepare_many(project_id, items)
        texts = _texts(prepared)
        if self.embedder is not None and texts:
            prepared = _with_vectors(prepared, (yield texts))
        return self.write_many(project_id, prepared, actor=actor)

    def prepare_many(self, project_id: str, items: list[NewDocument]) -> list[_Prepared]:
        """Each document read, checked and chunked (no embeddings yet, nothing written)."""
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
        return prepared

    def write_many(self, project_id: str, prepared: list[_Prepared], *, actor: Actor) -> list[dict[str, Any]]:
        """The documents prepared (and embedded), written in one transaction."""
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
            pieces=pieces,
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
            self._check_caps(batch.usage, row, old_vectors, p)
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

    def remove(self, project_id: str, doc_id: str, *, actor: Actor) -> bool:
        check_doc_id(doc_id)
        with self._writing(project_id) as (s, events):
            row = ks.document(s, project_id, doc_id)
            if row is None:
                return False
            coll = s.get(KnowledgeCollection, row.collection_id)
            vectors = ks.vector_bytes(s, row.id) if row.id is not None else 0
            ks.remove_document(s, row)
            ks.count(s, row.collection_id, -1, -row.chunks, -row.size, -vectors)
            details = {"collection": coll.name if coll else None, "document": doc_id}
            events.append((AuditName.KNOWLEDGE_DOCUMENT_REMOVED, actor, doc_id, details))
        return True

    def import_lines(self, project_id: str, lines: Iterable[Any], *, actor: Actor) -> dict[str, Any]:
        """Apply an export: collections are created, documents added or replaced by id, in
        transactions of IMPORT_BATCH documents. Stops at the first line it cannot use, naming
        it; what came before it stays. Blocking, the embeddings included: the command line's
        (the server's is `import_async`)."""
        return _drive(self._import_steps(project_id, lines, actor=actor), self._embed_blocking)

    async def import_async(
        self, project_id: str, lines: Iterable[Any], *, actor: Actor, account: str
    ) -> dict[str, Any]:
        """`import_lines` in database steps (each batch read and written in its own), its
        embeddings fetched between them, outside any."""
        steps = self._import_steps(project_id, lines, actor=actor)
        vectors: list[list[float]] | None = None
        try:
            while True:
                done, value = await run_db(_step, steps, vectors)
                if done:
                    return cast(dict[str, Any], value)
                vectors = await self._embed(account, cast(list[str], value))
        finally:
            steps.close()

    def _import_steps(
        self, project_id: str, lines: Iterable[Any], *, actor: Actor
    ) -> Generator[list[str], list[list[float]], dict[str, Any]]:
        counts = {"collections": 0, "added": 0, "replaced": 0, "updated": 0, "unchanged": 0}
        batch: list[tuple[int, NewDocument]] = []
        seen: set[str] = set()  # the collection lines already applied

        def flush() -> Generator[list[str], list[list[float]], None]:
            try:
                done = yield from self._add_steps(project_id, [item for _, item in batch], actor=actor)
            except (KnowledgeRefused, KnowledgeFull):
                done = []
                for number, item in batch:  # again one by one: the lines before the bad one stay
                    try:
                        done.append((yield from self._add_steps(project_id, [item], actor=actor))[0])
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
                yield from flush()  # what came before this line is written first
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
                yield from flush()
        if batch:
            yield from flush()
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

    def _embed_blocking(self, texts: list[str]) -> list[list[float]]:
        assert self.embedder is not None
        return self.embedder.embed(texts)

    async def _embed(self, account: str, texts: list[str]) -> list[list[float]]:
        """The texts' embeddings, paid from the account's (and the server's) allowance, one
        of the server's requests in flight at a time; never inside a database thread."""
        assert self.embedder is not None
        self.gate.admit(account, batches(len(texts)))
        async with self.gate.in_flight(account):
            return await self.embedder.embed_async(texts)

    def _check_caps(
        self, used: ks.Usage, replaced: KnowledgeDocument | None, replaced_vectors: int, p: _Prepared
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


def _texts(prepared: list[_Prepared]) -> list[str]:
    return [p.body for item in prepared for p in item.pieces]


def _with_vectors(prepared: list[_Prepared], vectors: list[list[float]]) -> list[_Prepared]:
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


def _drive(
    steps: Generator[list[str], list[list[float]], T], embed: Callable[[list[str]], list[list[float]]]
) -> T:
    """Run steps to their end here, embedding what they ask with `embed` (blocking)."""
    try:
        texts = next(steps)
        while True:
            texts = steps.send(embed(texts))
    except StopIteration as stop:
        return cast(T, stop.value)


def _step(
    steps: Generator[list[str], list[list[float]], Any], sent: list[list[float]] | None
) -> tuple[bool, Any]:
    """One step (in a database thread): (False, texts to embed) or (True, the result)."""
    try:
        return False, next(steps) if sent is None else steps.send(sent)
    except StopIteration as stop:
        return True, stop.value


def _pause(took: float) -> float:
    """The pause after a removal step that took `took` seconds."""
    return min(max(took, REMOVE_PAUSE_SECONDS), 1.0)


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
