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

from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from webui.blocking import run_db
from webui.errors import InvalidRequest, KnowledgeRefused, NotFound
from webui.files.store import FileTooLarge
from webui.knowledge.model import MAX_PAGE, check_name
from webui.parse_threads import run_parse
from webui.web import knowledge_transfer
from webui.web.api_models import (
    KnowledgeCollection,
    KnowledgeCollectionMade,
    KnowledgeCollectionRemoved,
    KnowledgeCollections,
    KnowledgeDocumentAdded,
    KnowledgeDocumentPage,
    KnowledgeDocumentText,
    KnowledgeSearchResult,
)
from webui.web.deps import ServicesDep
from webui.web.json_body import StrictBody, parse_json
from webui.web.knowledge_access import (
    KNOWLEDGE_JSON,
    NOT_FOUND,
    WRITE,
    CollectionName,
    CollectionQuery,
    DocumentId,
    Reader,
    Writer,
    actor_of,
)
from webui.web.knowledge_bodies import NewCollection, NewDocument, Search

FORM_OVERHEAD = 64 * 1024  # a multipart body's boundaries, headers and small fields
MAX_FIELD_BYTES = 64 * 1024  # one non-file field of a multipart body (metadata: 8 KiB)
MAX_FILE_NAME = 255
FORM_FIELDS = frozenset({"collection", "file", "id", "title", "metadata"})

router = APIRouter(prefix="/api/workflows/{project_id}/knowledge", tags=["knowledge"])


# --------------------------------------------------------------------------- collections


@router.get(
    "/collections",
    summary="The knowledge base's collections, with their counts",
    response_model=KnowledgeCollections,
    responses=NOT_FOUND,
)
async def list_knowledge_collections(project_id: str, caller: Reader, services: ServicesDep) -> Any:
    return {"collections": await run_db(services.knowledge.collections, project_id)}


@router.post(
    "/collections",
    summary="Create a collection {name, language?}: 201 when created, 200 when it existed",
    status_code=201,
    response_model=KnowledgeCollectionMade,
    responses={
        200: {"description": "the collection existed (created: false)", "model": KnowledgeCollectionMade},
        **WRITE,
    },
)
async def create_knowledge_collection(
    request: Request,
    project_id: str,
    caller: Writer,
    body: StrictBody[NewCollection],
    services: ServicesDep,
) -> Response:
    view = await run_db(
        lambda: services.knowledge.create_collection(
            project_id, body.name, language=body.language, actor=actor_of(request, caller)
        )
    )
    return JSONResponse(view, status_code=201 if view["created"] else 200)


@router.get(
    "/collections/{name}",
    summary="One collection and its counts",
    response_model=KnowledgeCollection,
    responses=NOT_FOUND,
)
async def show_knowledge_collection(
    project_id: str, name: CollectionName, caller: Reader, services: ServicesDep
) -> Any:
    return await run_db(services.knowledge.collection, project_id, name)


@router.delete(
    "/collections/{name}",
    summary="Remove a collection and every document in it",
    response_model=KnowledgeCollectionRemoved,
    responses=WRITE,
)
async def remove_knowledge_collection(
    request: Request, project_id: str, name: CollectionName, caller: Writer, services: ServicesDep
) -> Any:
    """Hidden at once, then removed in short transactions (a removal under way, or cut short,
    goes on when it is asked again)."""
    return await services.knowledge.remove_collection_async(project_id, name, actor=actor_of(request, caller))


# --------------------------------------------------------------------------- documents


@router.get(
    "/documents",
    summary="A page of documents by id (without their texts); `next` is the `after` of the next page",
    response_model=KnowledgeDocumentPage,
    responses={400: WRITE[400], **NOT_FOUND},
)
async def list_knowledge_documents(
    project_id: str,
    caller: Reader,
    services: ServicesDep,
    collection: CollectionQuery = None,
    filter: Annotated[
        str | None,
        Query(max_length=4096, description='A JSON object: {"key": value} or {"key": [value, ...]}.'),
    ] = None,
    after: Annotated[str | None, Query(max_length=128, description="The `next` of the page before.")] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = None,
) -> Any:
    filters = (
        None
        if filter is None
        else await run_parse(
            len(filter), parse_json, filter, what="filter", error=KnowledgeRefused, limits=KNOWLEDGE_JSON
        )
    )
    return await run_db(
        lambda: services.knowledge.documents(
            project_id, collection=collection, filter=filters, after=after, limit=limit
        )
    )


def json_or_multipart(request: Request) -> None:
    """A document is JSON or a multipart upload: a urlencoded form is refused unread."""
    if request.headers.get("content-type", "").lower().startswith("application/x-www-form-urlencoded"):
        raise KnowledgeRefused("send the document as JSON, or its file as multipart/form-data")


@router.post(
    "/documents",
    summary="Add a document from text (JSON) or from a file (multipart): 201 added, else 200 with its status",
    status_code=201,
    response_model=KnowledgeDocumentAdded,
    responses={
        200: {
            "description": "replaced, updated (title or metadata) or unchanged: see `status`",
            "model": KnowledgeDocumentAdded,
        },
        413: {"description": "file_too_large: the file is larger than a file may be"},
        422: {"description": "invalid_request: a multipart body without its collection or file"},
        429: {"description": "too_many_extractions: the account's (or server's) files being read at once"},
        **WRITE,
    },
)
async def add_knowledge_document(
    request: Request,
    project_id: str,
    caller: Writer,
    _: Annotated[None, Depends(json_or_multipart)],
    body: StrictBody[NewDocument | None],
    services: ServicesDep,
) -> Response:
    fields: dict[str, Any]
    if body is None:  # multipart/form-data
        fields = await _uploaded(request, services.knowledge.limits.max_file_bytes)
    else:
        fields = {"collection": body.collection, "text": body.text, "id": body.id}
        fields |= {"title": body.title, "metadata": body.metadata}
    file = None
    if fields.get("data") is not None:
        check_name(fields["collection"])  # before the file is read
        # Read in a bounded child during one of the account's turns, before any database work.
        file = await services.knowledge.reader.read(fields["file_name"], fields["data"], account=caller.actor)
    view = await services.knowledge.add_async(
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


async def _uploaded(request: Request, limit: int) -> dict[str, Any]:
    """The fields of a multipart upload: its file read whole (bounded by `limit`,
    STEAMHARNESS_MAX_FILE_BYTES), the rest as text."""
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


@router.get(
    "/documents/{doc_id}",
    summary="One document with its text",
    response_model=KnowledgeDocumentText,
    responses=NOT_FOUND,
)
async def show_knowledge_document(
    project_id: str, doc_id: DocumentId, caller: Reader, services: ServicesDep
) -> Any:
    view = await run_db(services.knowledge.get, project_id, doc_id)
    if view is None:
        raise NotFound(f"document {doc_id!r} not found")
    return view


@router.delete("/documents/{doc_id}", summary="Remove a document", status_code=204, responses=WRITE)
async def remove_knowledge_document(
    request: Request, project_id: str, doc_id: DocumentId, caller: Writer, services: ServicesDep
) -> Response:
    removed = await run_db(
        lambda: services.knowledge.remove(project_id, doc_id, actor=actor_of(request, caller))
    )
    if not removed:
        raise NotFound(f"document {doc_id!r} not found")
    return Response(status_code=204)


# --------------------------------------------------------------------------- search


@router.post(
    "/search",
    summary="The best chunks for a query, best first, with snippets and highlights",
    response_model=KnowledgeSearchResult,
    responses={
        400: WRITE[400],
        429: {"description": "too_many_reads or embeddings_throttled (with Retry-After)"},
        **NOT_FOUND,
    },
)
async def search_knowledge(
    project_id: str,
    caller: Reader,  # a POST: a browser session sends its token
    body: StrictBody[Search],
    services: ServicesDep,
) -> Any:
    return await services.knowledge.search_async(
        project_id,
        body.query,
        account=caller.actor,
        collection=body.collection,
        filter=body.filter,
        limit=body.limit,
        mode="auto" if body.mode is None else body.mode,
    )


# --------------------------------------------------------------------------- export, import

router.include_router(knowledge_transfer.router)
