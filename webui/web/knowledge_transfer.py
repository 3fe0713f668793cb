"""Export and import of a project's knowledge base over the JSON API (part of
`webui.web.knowledge_api`, whose docstring says who may use them): an export streamed as
NDJSON, read a bounded batch a short database step and audited as it starts; an import's
lines parsed in a parse thread, then written a batch a database step."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from webui.audit.events import AuditName
from webui.blocking import run_db
from webui.errors import KnowledgeRefused
from webui.knowledge.model import Actor
from webui.knowledge.service import ExportCursor, KnowledgeService
from webui.parse_threads import run_parse
from webui.services import Services
from webui.web.api_models import KnowledgeImported
from webui.web.deps import ServicesDep
from webui.web.json_body import RawBody, parse_json
from webui.web.knowledge_access import (
    KNOWLEDGE_JSON,
    NOT_FOUND,
    WRITE,
    Caller,
    CollectionQuery,
    Reader,
    Writer,
    actor_of,
)
from webui.web.streams import HeldStream

NDJSON = "application/x-ndjson"
SPLIT_BYTES = 1024 * 1024  # an import's body is cut into lines this much at a time

router = APIRouter()


def _export_started(
    services: Services, request: Request, caller: Caller, project_id: str, collection: str | None
) -> None:
    """Audited as the export starts, with what it holds then (404 for an unknown collection)."""
    counts = services.knowledge.export_counts(project_id, collection)
    actor = actor_of(request, caller)
    services.audit.record_alone(
        services.engine,
        AuditName.KNOWLEDGE_EXPORTED,
        actor=actor.actor,
        project_id=project_id,
        target=collection,
        source=actor.source,
        client_address=actor.client_address,
        user_agent=actor.user_agent,
        details={"collection": collection, **counts},
    )


def _export_batch(
    kb: KnowledgeService, project_id: str, collection: str | None, cursor: ExportCursor | None
) -> tuple[bytes, ExportCursor | None]:
    """The export's next lines as NDJSON, read and encoded in one short database step."""
    lines, cursor = kb.export_batch(project_id, collection, cursor)
    encoded = b"".join(
        json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for line in lines
    )
    return encoded, cursor


async def _exported(kb: KnowledgeService, project_id: str, collection: str | None) -> AsyncIterator[bytes]:
    cursor: ExportCursor | None = None
    while True:
        data, cursor = await run_db(_export_batch, kb, project_id, collection, cursor)
        if data:
            yield data
        if cursor is None:
            return


@router.get(
    "/export",
    summary="Export the knowledge base (or one collection) as NDJSON: collections, then their documents",
    response_class=Response,  # its lines are NDJSON, never one JSON document
    responses={
        200: {"content": {NDJSON: {}}, "description": "one JSON object a line"},
        429: {"description": "too_many_reads: the account's searches and exports running at once"},
        **NOT_FOUND,
    },
)
async def export_knowledge(
    request: Request,
    project_id: str,
    caller: Reader,
    services: ServicesDep,
    collection: CollectionQuery = None,
) -> Response:
    kb = services.knowledge
    release = kb.reads.take(caller.actor)  # over the cap: 429, nothing held
    try:
        await run_db(_export_started, services, request, caller, project_id, collection)
    except BaseException:
        release()
        raise
    name = f"knowledge-{project_id}" + (f"-{collection}" if collection else "")
    return HeldStream(
        _exported(kb, project_id, collection),
        release,
        media_type=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="{name}.ndjson"', "Cache-Control": "no-store"},
    )


def _lines(raw: bytes) -> Iterator[bytes]:
    """`raw.split(b"\\n")`, split about `SPLIT_BYTES` at a time: one split of a whole body of
    blank lines holds the GIL for as long as it makes millions of them (a second per 50 MiB)."""
    start = 0
    while start <= len(raw):
        end = raw.find(b"\n", start + SPLIT_BYTES)
        end = len(raw) if end < 0 else end
        yield from raw[start:end].split(b"\n")
        start = end + 1


def _parsed_lines(raw: bytes) -> list[Any]:
    """The body's NDJSON lines parsed (blank lines skipped, still counted), up to the first
    that is not JSON: that one's error, last."""
    parsed: list[Any] = []
    for number, line in enumerate(_lines(raw), start=1):
        if line.strip():
            try:
                parsed.append(
                    parse_json(line, what=f"line {number}", error=KnowledgeRefused, limits=KNOWLEDGE_JSON)
                )
            except KnowledgeRefused as exc:
                parsed.append(exc)
                break
    return parsed


def _replayed(parsed: list[Any]) -> Iterator[Any]:
    """The lines parsed, the first bad one raising its error where it stood."""
    for line in parsed:
        if isinstance(line, KnowledgeRefused):
            raise line
        yield line


def _imported(services: Services, actor: Actor, project_id: str, size: int, counts: dict[str, Any]) -> None:
    services.audit.record_alone(
        services.engine,
        AuditName.KNOWLEDGE_IMPORTED,
        actor=actor.actor,
        project_id=project_id,
        source=actor.source,
        client_address=actor.client_address,
        user_agent=actor.user_agent,
        details={"bytes": size, **counts},
    )


@router.post(
    "/import",
    summary="Import the NDJSON of an export: collections created, documents added or replaced by id",
    response_model=KnowledgeImported,
    responses={
        400: {"description": "invalid_knowledge: the first line that cannot be used (lines before it stay)"},
        413: {"description": "too_large: past the upload cap (STEAMHARNESS_MAX_FILE_BYTES and 1 MiB)"},
        **{k: v for k, v in WRITE.items() if k != 400},
    },
)
async def import_knowledge(
    request: Request,
    project_id: str,
    caller: Writer,
    services: ServicesDep,
    _: Annotated[None, Depends(RawBody((NDJSON, "text/plain")))],
) -> Any:
    raw = await request.body()  # bounded by the guard (webui.edge.guard: LARGE_BODY_PATH)
    if not raw.strip():
        raise KnowledgeRefused("the body is empty; send the NDJSON lines of an export")
    actor = actor_of(request, caller)
    # Parsed in a parse thread; then each batch of lines written in a database step of its
    # own, its embeddings fetched between them.
    parsed = await run_parse(len(raw), _parsed_lines, raw)
    counts = await services.knowledge.import_async(
        project_id, _replayed(parsed), actor=actor, account=caller.actor
    )
    await run_db(_imported, services, actor, project_id, len(raw), counts)
    return counts
