"""JSON API of a project's knowledge base, over `Services.knowledge`.

    GET    /api/workflows/{id}/knowledge/collections          {collections: [...]}
    POST   /api/workflows/{id}/knowledge/collections          {name, language?}: 201 created, 200 existed
    GET    /api/workflows/{id}/knowledge/collections/{name}   one collection and its counts
    DELETE /api/workflows/{id}/knowledge/collections/{name}   it and its documents: {name, removedDocuments}
    GET    /api/workflows/{id}/knowledge/documents            ?collection=&filter=<JSON object>&after=&limit=
                                                              a page {documents, next} (no texts)
    POST   /api/workflows/{id}/knowledge/documents            JSON {collection, text, id?, title?, metadata?}
                                                              or multipart/form-data (collection, file, id?,
                                                              title?, metadata as JSON text): 201 added,
                                                              200 replaced/updated/unchanged (`status`)
    GET    /api/workflows/{id}/knowledge/documents/{docId}    one document with its text
    DELETE /api/workflows/{id}/knowledge/documents/{docId}    204
    POST   /api/workflows/{id}/knowledge/search               {query, collection?, filter?, limit?, mode?}
    GET    /api/workflows/{id}/knowledge/export               ?collection=: NDJSON, an object a line (audited)
    POST   /api/workflows/{id}/knowledge/import               NDJSON lines of an export: counts (audited)

Readers (list, get, search, export): the server admin key; an API key that may read the
project (`runs.create` or `runs.read`) or holds the `knowledge` scope on it; a browser user
the project is granted to (administrators: every project). Writers (everything else, import
included): the server admin key; an API key with the `knowledge` scope on a project it is
granted; a browser administrator, with the session's CSRF token in `X-CSRF-Token`. A caller
who may not read the project gets 404, as for an unknown project; a reader who may not
write gets 403. Who is asking is decided before a byte of the body is read; JSON bodies go
through the strict reader, and every body is bounded by the guard: a document's (JSON, multipart)
and an import by `STEAMHARNESS_MAX_FILE_BYTES` plus 1 MiB, every other by
`STEAMHARNESS_MAX_BODY_BYTES`; a file by `STEAMHARNESS_MAX_FILE_BYTES`.

Searches and exports are heavy reads: one account runs at most
`STEAMHARNESS_KNOWLEDGE_MAX_READS_PER_ACCOUNT` at once (the next is `too_many_reads`, 429
with Retry-After); an export holds its slot until it is downloaded. An export is streamed,
read a bounded batch a short database step (nothing is spooled), and audited as it starts.
Embeddings are fetched outside any database step, within the endpoint's allowance
(`embeddings_throttled`, 429 with Retry-After; webui.knowledge.gates). An uploaded file is
read (webui.knowledge.reader: a bounded child, a few at once per account) before any database work.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from webui.audit.events import AuditName
from webui.auth.keys import AuthError, Forbidden, Principal
from webui.blocking import run_db
from webui.errors import InvalidRequest, KnowledgeRefused, NotFound
from webui.files.store import FileTooLarge
from webui.knowledge.model import (
    DOC_ID_RE,
    MAX_JSON_CONTAINERS,
    MAX_JSON_VALUES,
    MAX_PAGE,
    NAME_RE,
    Actor,
    check_name,
)
from webui.knowledge.service import ExportCursor, KnowledgeService
from webui.parse_threads import run_parse
from webui.services import Services
from webui.web.deps import UNSAFE_METHODS, get_ui_user
from webui.web.json_body import Limits, json_object, parse_json
from webui.web.security import check_csrf
from webui.web.streams import HeldStream

SCOPE = "knowledge"
NDJSON = "application/x-ndjson"
FORM_OVERHEAD = 64 * 1024  # a multipart body's boundaries, headers and small fields
MAX_FIELD_BYTES = 64 * 1024  # one non-file field of a multipart body (metadata: 8 KiB)
MAX_FILE_NAME = 255
DOCUMENT_MEMBERS = frozenset({"collection", "text", "id", "title", "metadata"})
FORM_FIELDS = frozenset({"collection", "file", "id", "title", "metadata"})
SEARCH_MEMBERS = frozenset({"query", "collection", "filter", "limit", "mode"})
COLLECTION_MEMBERS = frozenset({"name", "language"})
# Every JSON these routes read: a body, an import's line, a filter or metadata field.
KNOWLEDGE_JSON = Limits(values=MAX_JSON_VALUES, containers=MAX_JSON_CONTAINERS)
SPLIT_BYTES = 1024 * 1024  # an import's body is cut into lines this much at a time

router = APIRouter(prefix="/api/workflows/{project_id}/knowledge", tags=["knowledge"])


@dataclass(frozen=True)
class Caller:
    """Who uses a project's knowledge base, and whether they may change it."""

    actor: str
    source: str  # "api" (a key) or "ui" (the browser session)
    may_write: bool
    refusal: str  # why a write is refused (when it is)


def _of_key(principal: Principal, project_id: str) -> Caller | None:
    """The key's rights on the project (None: it may not even read it)."""
    if principal.kind == "admin":
        return Caller(principal.actor, "api", True, "")
    writes = principal.may_change_knowledge(project_id)
    if not (writes or principal.may_read(project_id)):
        return None
    why = f"this API key lacks the {SCOPE} scope (create a key with --scope {SCOPE})"
    return Caller(principal.actor, "api", writes, why)


async def caller_of(request: Request, project_id: str, *, write: bool) -> Caller:
    """The caller, allowed to read the project (else 404, as for an unknown project) and,
    for `write`, to change its knowledge base (else 403). Never reads the body."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        caller = _of_key(principal, project_id)
    else:
        user = await run_db(get_ui_user, request)
        if user is None:
            raise AuthError("missing Authorization: Bearer <API key> (or log in to use the browser session)")
        if request.method in UNSAFE_METHODS:
            check_csrf(user.csrf_token, request.headers.get("x-csrf-token"))
        why = "only an administrator may change a project's knowledge base from the browser"
        caller = Caller(user.actor, "ui", user.is_admin, why) if user.may_use(project_id) else None
    if caller is None:
        raise NotFound(f"project {project_id!r} is not registered")
    await run_db(request.app.state.registry.record, project_id)  # 404 when unknown
    if write and not caller.may_write:
        raise Forbidden(caller.refusal)
    return caller


def actor_of(request: Request, caller: Caller) -> Actor:
    return request_actor(request, caller.actor, caller.source)


def request_actor(request: Request, actor: str, source: str) -> Actor:
    """Who writes, for the audit log: the caller and where the request came from."""
    return Actor(
        actor=actor,
        source=source,
        client_address=request.client.host if request.client else None,
        user_agent=request.headers.get("user-agent"),
    )


def _services(request: Request) -> Services:
    return request.app.state.services


async def _object(request: Request, members: frozenset[str]) -> dict[str, Any]:
    body = await json_object(request, error=KnowledgeRefused, limits=KNOWLEDGE_JSON)
    unknown = sorted(set(body) - members)
    if unknown:
        raise KnowledgeRefused(f"unknown member {unknown[0]!r} (known: {', '.join(sorted(members))})")
    return body


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise KnowledgeRefused(f"{key}: expected a string")
    return value


def _json_body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """OpenAPI for a JSON body the route reads itself (after the caller is known)."""
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


FILTER = {"type": "object", "description": 'metadata filter: {"key": value} or {"key": [value, ...]}'}
METADATA = {"type": "object", "description": "a JSON object (at most 4 levels, 64 keys, 8 KiB)"}
Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {
    404: {"description": "not_found: the project (or one you may not use), collection or document"}
}
WRITE: Responses = {
    400: {"description": "invalid_knowledge: a bad name, id, metadata, filter or file"},
    403: {"description": "forbidden: no knowledge scope (API key) or not an administrator (browser)"},
    409: {"description": "knowledge_full: past a cap of the project's knowledge base"},
    **NOT_FOUND,
}
CollectionName = Annotated[str, Path(max_length=64, pattern=NAME_RE.pattern)]
DocumentId = Annotated[str, Path(max_length=128, pattern=DOC_ID_RE.pattern)]
CollectionQuery = Annotated[
    str | None, Query(min_length=1, max_length=64, description="Only this collection's (a name).")
]


# --------------------------------------------------------------------------- collections


@router.get(
    "/collections", summary="The knowledge base's collections, with their counts", responses=NOT_FOUND
)
async def list_knowledge_collections(request: Request, project_id: str) -> Any:
    await caller_of(request, project_id, write=False)
    return {"collections": await run_db(_services(request).knowledge.collections, project_id)}


@router.post(
    "/collections",
    summary="Create a collection {name, language?}: 201 when created, 200 when it existed",
    status_code=201,
    openapi_extra=_json_body(
        {"name": {"type": "string"}, "language": {"type": "string", "description": "a Snowball language"}},
        ["name"],
    ),
    responses={200: {"description": "the collection existed (created: false)"}, **WRITE},
)
async def create_knowledge_collection(request: Request, project_id: str) -> Response:
    caller = await caller_of(request, project_id, write=True)
    body = await _object(request, COLLECTION_MEMBERS)
    name = check_name(body.get("name"))
    language = _optional_str(body, "language")
    view = await run_db(
        lambda: _services(request).knowledge.create_collection(
            project_id, name, language=language, actor=actor_of(request, caller)
        )
    )
    return JSONResponse(view, status_code=201 if view["created"] else 200)


@router.get("/collections/{name}", summary="One collection and its counts", responses=NOT_FOUND)
async def show_knowledge_collection(request: Request, project_id: str, name: CollectionName) -> Any:
    await caller_of(request, project_id, write=False)
    return await run_db(_services(request).knowledge.collection, project_id, name)


@router.delete("/collections/{name}", summary="Remove a collection and every document in it", responses=WRITE)
async def remove_knowledge_collection(request: Request, project_id: str, name: CollectionName) -> Any:
    """Hidden at once, then removed in short transactions (a removal under way, or cut short,
    goes on when it is asked again)."""
    caller = await caller_of(request, project_id, write=True)
    return await _services(request).knowledge.remove_collection_async(
        project_id, name, actor=actor_of(request, caller)
    )


# --------------------------------------------------------------------------- documents


@router.get(
    "/documents",
    summary="A page of documents by id (without their texts); `next` is the `after` of the next page",
    responses={400: WRITE[400], **NOT_FOUND},
)
async def list_knowledge_documents(
    request: Request,
    project_id: str,
    collection: CollectionQuery = None,
    filter: Annotated[
        str | None,
        Query(max_length=4096, description='A JSON object: {"key": value} or {"key": [value, ...]}.'),
    ] = None,
    after: Annotated[str | None, Query(max_length=128, description="The `next` of the page before.")] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = None,
) -> Any:
    await caller_of(request, project_id, write=False)
    filters = (
        None
        if filter is None
        else await run_parse(
            len(filter), parse_json, filter, what="filter", error=KnowledgeRefused, limits=KNOWLEDGE_JSON
        )
    )
    return await run_db(
        lambda: _services(request).knowledge.documents(
            project_id, collection=collection, filter=filters, after=after, limit=limit
        )
    )


DOCUMENT_PROPERTIES: dict[str, Any] = {
    "collection": {"type": "string"},
    "id": {"type": "string", "description": "default: from the collection and the text"},
    "title": {"type": "string"},
}
ADD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {**DOCUMENT_PROPERTIES, "text": {"type": "string"}, "metadata": METADATA},
                    "required": ["collection", "text"],
                    "additionalProperties": False,
                }
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        **DOCUMENT_PROPERTIES,
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": ".txt .md .html .pdf .docx",
                        },
                        "metadata": {"type": "string", "description": "a JSON object, as text"},
                    },
                    "required": ["collection", "file"],
                }
            },
        },
    }
}


@router.post(
    "/documents",
    summary="Add a document from text (JSON) or from a file (multipart): 201 added, else 200 with its status",
    status_code=201,
    openapi_extra=ADD_BODY,
    responses={
        200: {"description": "replaced, updated (title or metadata) or unchanged: see `status`"},
        413: {"description": "file_too_large: the file is larger than a file may be"},
        422: {"description": "invalid_request: a multipart body without its collection or file"},
        429: {"description": "too_many_extractions: the account's (or server's) files being read at once"},
        **WRITE,
    },
)
async def add_knowledge_document(request: Request, project_id: str) -> Response:
    caller = await caller_of(request, project_id, write=True)
    fields: dict[str, Any]
    content_type = request.headers.get("content-type", "").lower()
    if content_type.startswith("multipart/form-data"):
        fields = await _uploaded(request)
    elif content_type.startswith("application/x-www-form-urlencoded"):
        raise KnowledgeRefused("send the document as JSON, or its file as multipart/form-data")
    else:
        body = await _object(request, DOCUMENT_MEMBERS)
        if not isinstance(body.get("text"), str):
            raise KnowledgeRefused('text: expected the document\'s text as a string (or upload a "file")')
        fields = {key: body.get(key) for key in ("collection", "text", "id", "title", "metadata")}
    file = None
    if fields.get("data") is not None:
        check_name(fields["collection"])  # before the file is read
        # Read in a bounded child during one of the account's turns, before any database work.
        file = await _services(request).knowledge.reader.read(
            fields["file_name"], fields["data"], account=caller.actor
        )
    view = await _services(request).knowledge.add_async(
        project_id,
        fields["collection"],
        actor=actor_of(request, caller),
        account=caller.actor,
        text=fields.get("text"),
        file=file,
        doc_id=fields.get("id"),
        title=fields.get("title"),
        metadata=fields.get("metadata"),
    )
    return JSONResponse(view, status_code=201 if view["status"] == "added" else 200)


def _file_limit(request: Request) -> int:
    return _services(request).knowledge.limits.max_file_bytes  # STEAMHARNESS_MAX_FILE_BYTES


async def _uploaded(request: Request) -> dict[str, Any]:
    """The fields of a multipart upload: its file read whole (bounded), the rest as text."""
    limit = _file_limit(request)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + FORM_OVERHEAD:
        raise FileTooLarge(f"the upload is larger than the {limit} bytes a file may be")
    async with request.form(max_files=1, max_fields=len(FORM_FIELDS), max_part_size=MAX_FIELD_BYTES) as form:
        unknown = sorted(set(form.keys()) - FORM_FIELDS)
        if unknown:
            raise _invalid(unknown[0], f"unknown field (known: {', '.join(sorted(FORM_FIELDS))})")
        texts: dict[str, str | None] = {}
        for key in ("collection", "id", "title", "metadata"):
            value = form.get(key)
            if isinstance(value, UploadFile):
                raise _invalid(key, "expected a text field, not a file")
            texts[key] = value
        upload = form.get("file")
        if not texts["collection"]:
            raise _invalid("collection", "the collection to add the file to is missing")
        if not isinstance(upload, UploadFile):
            raise _invalid("file", "expected a file (a part with a filename)")
        name = _file_name(upload.filename)
        data = await upload.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"{name}: larger than the {limit} bytes a file may be")
    metadata = texts["metadata"]
    return {
        "collection": texts["collection"],
        "file_name": name,
        "data": data,
        "id": texts["id"] or None,
        "title": texts["title"] or None,
        "metadata": None
        if not metadata
        else await run_parse(
            len(metadata),
            parse_json,
            metadata,
            what="metadata",
            error=KnowledgeRefused,
            limits=KNOWLEDGE_JSON,
        ),
    }


def _file_name(raw: str | None) -> str:
    """The upload's own name, without any folders a client put in it."""
    name = PurePosixPath((raw or "").replace("\\", "/")).name.strip()
    if not name:
        raise _invalid("file", "the file has no name (its name says its kind: .txt .md .html .pdf .docx)")
    return name[:MAX_FILE_NAME]


def _invalid(field: str, problem: str) -> InvalidRequest:
    return InvalidRequest(f"invalid request: body.{field}: {problem}", {f"body.{field}": problem})


@router.get("/documents/{doc_id}", summary="One document with its text", responses=NOT_FOUND)
async def show_knowledge_document(request: Request, project_id: str, doc_id: DocumentId) -> Any:
    await caller_of(request, project_id, write=False)
    view = await run_db(_services(request).knowledge.get, project_id, doc_id)
    if view is None:
        raise NotFound(f"document {doc_id!r} not found")
    return view


@router.delete("/documents/{doc_id}", summary="Remove a document", status_code=204, responses=WRITE)
async def remove_knowledge_document(request: Request, project_id: str, doc_id: DocumentId) -> Response:
    caller = await caller_of(request, project_id, write=True)
    removed = await run_db(
        lambda: _services(request).knowledge.remove(project_id, doc_id, actor=actor_of(request, caller))
    )
    if not removed:
        raise NotFound(f"document {doc_id!r} not found")
    return Response(status_code=204)


# --------------------------------------------------------------------------- search


@router.post(
    "/search",
    summary="The best chunks for a query, best first, with snippets and highlights",
    openapi_extra=_json_body(
        {
            "query": {"type": "string"},
            "collection": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]
            },
            "filter": FILTER,
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "mode": {"type": "string", "enum": ["auto", "text", "vector", "hybrid"]},
        },
        ["query"],
    ),
    responses={
        400: WRITE[400],
        429: {"description": "too_many_reads or embeddings_throttled (with Retry-After)"},
        **NOT_FOUND,
    },
)
async def search_knowledge(request: Request, project_id: str) -> Any:
    caller = await caller_of(request, project_id, write=False)  # a POST: a browser session sends its token
    body = await _object(request, SEARCH_MEMBERS)
    if "query" not in body:
        raise KnowledgeRefused("query: the words to search for are missing")
    mode = body.get("mode")
    return await _services(request).knowledge.search_async(
        project_id,
        body["query"],
        account=caller.actor,
        collection=body.get("collection"),
        filter=body.get("filter"),
        limit=body.get("limit"),
        mode="auto" if mode is None else mode,
    )


# --------------------------------------------------------------------------- export, import


def _export_started(request: Request, caller: Caller, project_id: str, collection: str | None) -> None:
    """Audited as the export starts, with what it holds then (404 for an unknown collection)."""
    services = _services(request)
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
    responses={
        200: {"content": {NDJSON: {}}, "description": "one JSON object a line"},
        429: {"description": "too_many_reads: the account's searches and exports running at once"},
        **NOT_FOUND,
    },
)
async def export_knowledge(request: Request, project_id: str, collection: CollectionQuery = None) -> Response:
    caller = await caller_of(request, project_id, write=False)
    kb = _services(request).knowledge
    release = kb.reads.take(caller.actor)  # over the cap: 429, nothing held
    try:
        await run_db(_export_started, request, caller, project_id, collection)
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


def _imported(request: Request, actor: Actor, project_id: str, size: int, counts: dict[str, Any]) -> None:
    services = _services(request)
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
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {NDJSON: {"schema": {"type": "string"}}, "text/plain": {"schema": {"type": "string"}}},
        }
    },
    responses={
        400: {"description": "invalid_knowledge: the first line that cannot be used (lines before it stay)"},
        413: {"description": "too_large: past the upload cap (STEAMHARNESS_MAX_FILE_BYTES and 1 MiB)"},
        **{k: v for k, v in WRITE.items() if k != 400},
    },
)
async def import_knowledge(request: Request, project_id: str) -> Any:
    caller = await caller_of(request, project_id, write=True)
    raw = await request.body()  # bounded by the guard (webui.web.guard: LARGE_BODY_PATH)
    if not raw.strip():
        raise KnowledgeRefused("the body is empty; send the NDJSON lines of an export")
    actor = actor_of(request, caller)
    # Parsed in a parse thread; then each batch of lines written in a database step of its
    # own, its embeddings fetched between them.
    parsed = await run_parse(len(raw), _parsed_lines, raw)
    counts = await _services(request).knowledge.import_async(
        project_id, _replayed(parsed), actor=actor, account=caller.actor
    )
    await run_db(_imported, request, actor, project_id, len(raw), counts)
    return counts
