"""An export of a project's knowledge base as JSON lines, read a batch a short transaction
(`export_batch`), so no read stays open while the lines are used."""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.store import knowledge as ks
from webui.store.models import KnowledgeDocument

# An export reads at most this many documents, or (at least one) about this much text, a step.
EXPORT_BATCH_DOCUMENTS = 100
EXPORT_BATCH_BYTES = 4 * 1024 * 1024


class ExportCursor(NamedTuple):
    """Where an export goes on: in `collection` (its line `started` already), after the
    document `after` (None: from its first)."""

    collection: str
    after: str | None
    started: bool


def export_batch(
    engine: Engine, project_id: str, collection: str | None, cursor: ExportCursor | None
) -> tuple[list[dict[str, Any]], ExportCursor | None]:
    """The export's next lines from `cursor` (None: its start), read in one short
    transaction: at most EXPORT_BATCH_DOCUMENTS documents, and no more once about
    EXPORT_BATCH_BYTES of text are in (at least one document); and where it goes on
    (None: done). Collections by name, documents by id: a document added or removed
    meanwhile is in the export or not by where it falls."""
    lines: list[dict[str, Any]] = []
    room, held = EXPORT_BATCH_DOCUMENTS, 0
    with Session(engine) as s:
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
