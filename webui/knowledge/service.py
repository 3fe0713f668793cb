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

import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar, cast

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound
from webui.knowledge.embeddings import Embedder, batches
from webui.knowledge.export import ExportCursor, export_batch
from webui.knowledge.gates import EmbeddingsGate, ReadSlots
from webui.knowledge.model import (
    MAX_PAGE,
    Actor,
    Limits,
    check_doc_id,
    check_limit,
    check_name,
    parse_filter,
)
from webui.knowledge.reader import FileReader, FileText
from webui.knowledge.removal import CollectionRemovals
from webui.knowledge.search import search_embedded, search_mode
from webui.knowledge.writing import (
    KnowledgeWrites,
    NewDocument,
    cap_args,
    chunk_texts,
    collection_view,
    document_view,
    with_vectors,
)
from webui.store import knowledge as ks
from webui.store.models import KnowledgeCollection

IMPORT_BATCH = 100  # documents an import writes in one transaction
DEFAULT_READS_PER_ACCOUNT = 4
log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
# Runs a blocking step in a database thread: `run_db`, or a run's own writer (retried while busy).
Runner = Callable[..., Awaitable[Any]]


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
        # A file's text is read by `reader.read` before the database work (a route) or, for
        # a file's bytes given to `add`, by `reader.read_blocking` (the CLI; never in run_db).
        self.reader = reader or FileReader(
            max_file_bytes=self.limits.max_file_bytes, max_text_bytes=self.limits.max_document_bytes
        )
        self.writes = KnowledgeWrites(
            engine, audit=audit, audit_engine=audit_engine, limits=self.limits, reader=self.reader
        )
        self.removals = CollectionRemovals(engine, self.writes)

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
        used = search_mode(query, mode, embeddings=self.embedder is not None)
        vector = None
        if used in ("vector", "hybrid"):
            assert self.embedder is not None
            [vector] = self.embedder.embed([query])
        return search_embedded(
            self.engine,
            project_id,
            query,
            collection=collection,
            filter=filter,
            limit=limit,
            mode=used,
            vector=vector,
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
            used = search_mode(query, mode, embeddings=self.embedder is not None)
            vector = None
            if used in ("vector", "hybrid"):
                if not query.strip():
                    raise KnowledgeRefused("the query has no words to search for")
                [vector] = await self._embed(account, [query])
            return await run(
                search_embedded,
                self.engine,
                project_id,
                query,
                collection=collection,
                filter=filter,
                limit=limit,
                mode=used,
                vector=vector,
            )

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
        """The export's next lines from `cursor` (webui.knowledge.export.export_batch)."""
        return export_batch(self.engine, project_id, collection, cursor)

    # ------------------------------------------------------------------ writes

    def create_collection(
        self, project_id: str, name: str, *, language: str | None = None, actor: Actor
    ) -> dict[str, Any]:
        """The collection (created when new; the same language again changes nothing)."""
        check_name(name)
        lang = self.writes.language(language)
        with self.writes.writing(project_id) as (s, events):
            row = ks.collection_row(s, project_id, name)
            if row is not None and row.removing:
                raise KnowledgeRefused(
                    f"collection {name!r} is being removed; create it again once that is done"
                )
            created = row is None
            if row is None:
                self.writes.new_collection(s, project_id, name, lang)
                events.append((AuditName.KNOWLEDGE_COLLECTION_CREATED, actor, name, {"language": lang}))
            elif language is not None and row.language != lang:
                raise KnowledgeRefused(f"collection {name!r} exists with language {row.language!r}")
        return {**self.collection(project_id, name), "created": created}

    def remove_collection(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        """Remove the collection and its documents (blocking: the command line's; the
        server's is `remove_collection_async`), in short transactions."""
        return self.removals.remove_blocking(project_id, name, actor=actor)

    async def remove_collection_async(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        """Remove the collection: marked at once, then emptied by a task that goes on if the
        caller leaves; returns once it is gone."""
        return await self.removals.remove(project_id, name, actor=actor)

    async def resume_removals(self) -> None:
        """Finish the removals a stop cut short (the collections still marked)."""
        await self.removals.resume()

    async def close(self) -> None:
        """Stop the removals under way (each goes on at the next start)."""
        await self.removals.close()

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
        prepared = await run(self.writes.prepare_many, project_id, items)
        texts = chunk_texts(prepared)
        if self.embedder is not None and texts:
            prepared = with_vectors(prepared, await self._embed(account, texts))
        return await run(self.writes.write_many, project_id, prepared, actor=actor)

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
        prepared = self.writes.prepare_many(project_id, items)
        texts = chunk_texts(prepared)
        if self.embedder is not None and texts:
            prepared = with_vectors(prepared, (yield texts))
        return self.writes.write_many(project_id, prepared, actor=actor)

    def remove(self, project_id: str, doc_id: str, *, actor: Actor) -> bool:
        check_doc_id(doc_id)
        with self.writes.writing(project_id) as (s, events):
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
                        raise type(exc)(f"line {number}: {exc.message}", **cap_args(exc)) from None
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
                    raise type(exc)(f"{where}: {exc.message}", **cap_args(exc)) from None
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
