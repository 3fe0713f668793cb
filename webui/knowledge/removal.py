"""Removing a collection in steps: marked (hidden from every read and write from then on,
and audited once), then its documents deleted a bounded batch a transaction with a pause
between them (a waiting writer gets its turn), then its row. A removal cut short (a crash, a
shutdown) is finished at the next start (`resume`) or by removing it again."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anyio
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.blocking import DatabaseBusy, TaskSet, run_db
from webui.errors import NotFound
from webui.knowledge.model import Actor, check_name
from webui.knowledge.writing import KnowledgeWrites
from webui.store import knowledge as ks

# A removal deletes at most this many chunks (and documents) a transaction, then pauses as
# long as the step took (at least REMOVE_PAUSE_SECONDS, at most 1 s): a writer waiting for
# the database's lock gets it between two steps.
REMOVE_CHUNKS = 250
REMOVE_DOCUMENTS = 500
REMOVE_PAUSE_SECONDS = 0.05
REMOVE_BUSY_RETRIES = 5  # a step that finds the database busy is tried again this often
log = logging.getLogger(__name__)


class CollectionRemovals:
    """The removals of one knowledge base (`engine`), written through `writes`."""

    def __init__(self, engine: Engine, writes: KnowledgeWrites) -> None:
        self.engine = engine
        self.writes = writes
        self._tasks = TaskSet()  # collection removals, finished even when their request is not
        self._removals: dict[int, asyncio.Task[None]] = {}

    def remove_blocking(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
        """Remove the collection and its documents (blocking: the command line's; the
        server's is `remove`), in short transactions."""
        collection_id, documents = self.begin_removal(project_id, name, actor=actor)
        while True:
            started = time.monotonic()
            if self.remove_step(project_id, collection_id):
                return {"name": name, "removedDocuments": documents}
            time.sleep(_pause(time.monotonic() - started))

    async def remove(self, project_id: str, name: str, *, actor: Actor) -> dict[str, Any]:
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
        with self.writes.writing(project_id) as (s, events):
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
        with self.writes.writing(project_id) as (s, _events):
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

    async def resume(self) -> None:
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


def _pause(took: float) -> float:
    """The pause after a removal step that took `took` seconds."""
    return min(max(took, REMOVE_PAUSE_SECONDS), 1.0)
