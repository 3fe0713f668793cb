"""The knowledge-base page of a project: its collections, a paged list of documents, search
with the matching words highlighted, and (administrators only) uploads and removals.

    GET  /projects/{id}/knowledge[?q=&collection=&after=]   the page
    GET  /projects/{id}/knowledge/documents/{doc_id}         one document and its text
    POST /projects/{id}/knowledge/upload                     files into a collection (multipart)
    POST /projects/{id}/knowledge/remove                     one document
    POST /projects/{id}/knowledge/collections                create a collection
    POST /projects/{id}/knowledge/collections/remove         remove a collection and its documents

Everything a document holds (text, title, metadata, file name) is hostile input: the
templates render it through autoescaping only, snippets piece by piece (`Snippet.parts`).
Each POST answers 303 back to the page with a fixed notice (a notice code, never text taken
from the URL), or the page with the error. An upload sent by static/js/knowledge.js
(`Accept: application/json`) gets its per-file results as JSON instead.

An upload is refused (403) to anyone but an administrator before a byte of its body is
read (`uploader`); a search on the page is one of the person's heavy reads
(webui.knowledge.gates) and is embedded before any database work; a collection is removed
in short transactions (webui.knowledge.service).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.datastructures import FormData, UploadFile

from webui.auth.keys import Forbidden
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.errors import KnowledgeFull, KnowledgeRefused, NotFound, TooManyExtractions
from webui.knowledge import text as kt
from webui.knowledge.embeddings import EmbeddingsFailed
from webui.knowledge.gates import EmbeddingsThrottled, TooManyReads
from webui.knowledge.model import check_name
from webui.parse_threads import run_parse
from webui.web.deps import KnowledgeDep, LoginRequired, RegistryDep, get_ui_user, require_user
from webui.web.json_body import parse_json
from webui.web.knowledge_access import KNOWLEDGE_JSON, request_actor
from webui.web.mcp_page import Visible, VisibleDep, visible_record
from webui.web.policies import Policy, declared
from webui.web.state import app_state
from webui.web.templating import page

router = APIRouter(tags=["pages"])

PAGE_SIZE = 20
MAX_UPLOAD_FILES = 20
MAX_FILE_NAME = 200
NOTICES = {
    "uploaded": "Upload finished.",
    "removed": "Document removed.",
    "created": "Collection created.",
    "collection-removed": "Collection removed.",
}


@dataclass(frozen=True)
class Hit:
    """One search result as the page draws it: the snippet cut into (piece, highlighted)."""

    doc_id: str
    collection: str
    title: str
    parts: list[tuple[str, bool]]


@dataclass(frozen=True)
class FileResult:
    file: str
    status: str | None = None  # added | replaced | updated | unchanged
    doc_id: str | None = None
    error: str | None = None

    def view(self) -> dict[str, Any]:
        return {"file": self.file, "status": self.status, "id": self.doc_id, "error": self.error}


def page_url(project_id: str, **query: str | None) -> str:
    shown = {k: v for k, v in query.items() if v}
    return f"/projects/{project_id}/knowledge" + (f"?{urlencode(shown)}" if shown else "")


def parts(snippet: str, highlights: list[list[int]]) -> list[tuple[str, bool]]:
    spans = tuple((int(a), int(b)) for a, b in highlights)
    return kt.Snippet(snippet, spans).parts()


def _load(
    request: Request,
    project: Any,
    *,
    q: str | None,
    collection: str | None,
    after: str | None,
    found: dict[str, Any] | None = None,
    search_error: str | None = None,
    notice: str | None = None,
    error: str | None = None,
    results: list[FileResult] | None = None,
) -> dict[str, Any]:
    """The page's context; `found`: the search for `q`, made before (`_search`)."""
    service = app_state(request.app).services.knowledge
    project_id = project.record.id
    collections = service.collections(project_id)
    listing: dict[str, Any] = {"documents": [], "next": None}
    list_error = None
    try:
        listing = service.documents(project_id, collection=collection, after=after, limit=PAGE_SIZE)
    except (KnowledgeRefused, NotFound) as exc:
        list_error = exc.message
    hits: list[Hit] | None = None
    if found is not None:
        hits = [
            Hit(h["documentId"], h["collection"], h["title"], parts(h["snippet"], h["highlights"]))
            for h in found["hits"]
        ]
    more = listing["next"]
    return {
        "record": project.record,
        "project_id": project_id,
        "is_admin": project.user.is_admin,
        "collections": collections,
        "documents": listing["documents"],
        "next_url": page_url(project_id, collection=collection, after=more) if more else None,
        "first_url": page_url(project_id, collection=collection) if after else None,
        "list_error": list_error,
        "q": q or "",
        "collection": collection or "",
        "hits": hits,
        "search_error": search_error,
        "languages": kt.languages(),
        "default_language": kt.DEFAULT_LANGUAGE,
        "notice": notice,
        "error": error,
        "results": results or [],
    }


async def _search(request: Request, project: Any, q: str | None, collection: str | None) -> dict[str, Any]:
    """The page's search (`found`, or the reason it has none: `search_error`)."""
    if not q:
        return {}
    service = app_state(request.app).services.knowledge
    try:
        found = await service.search_async(
            project.record.id, q, account=project.user.actor, collection=collection or None
        )
    except (KnowledgeRefused, NotFound, TooManyReads, EmbeddingsThrottled, EmbeddingsFailed) as exc:
        return {"search_error": exc.message}
    return {"found": found}


async def _render(request: Request, project: Any, status_code: int = 200, **kwargs: Any) -> Response:
    given: dict[str, Any] = {"q": None, "collection": None, "after": None, **kwargs}
    given.update(await _search(request, project, given["q"], given["collection"]))
    context = await run_db(lambda: _load(request, project, **given))
    return page(request, "projects/knowledge.html", context, status_code=status_code)


@router.get("/projects/{project_id}/knowledge", summary="A project's knowledge base")
async def knowledge_page(
    request: Request,
    project: VisibleDep,
    q: str | None = None,
    collection: str | None = None,
    after: str | None = None,
    done: str | None = None,
) -> Response:
    return await _render(
        request,
        project,
        q=q,
        collection=collection or None,
        after=after or None,
        notice=NOTICES.get(done or ""),
    )


@router.get("/projects/{project_id}/knowledge/documents/{doc_id}", summary="One knowledge-base document")
async def knowledge_document(
    request: Request, project: VisibleDep, doc_id: str, service: KnowledgeDep
) -> Response:
    doc = await run_db(service.get, project.record.id, doc_id)
    if doc is None:
        raise NotFound(f"document {doc_id!r} not found")
    context = {
        "record": project.record,
        "project_id": project.record.id,
        "doc": doc,
        "metadata_json": json.dumps(doc["metadata"], ensure_ascii=False, indent=2, sort_keys=True),
        "is_admin": project.user.is_admin,
    }
    return page(request, "projects/knowledge_document.html", context)


def _admin(user: UiUser) -> None:
    if not user.is_admin:
        raise Forbidden("only administrators change a project's knowledge base")


async def uploader(request: Request, project_id: str, registry: RegistryDep) -> Visible:
    """An administrator's upload: the session (cookie) and the role (403) decided before a
    byte of the body is read; then the CSRF token, which may be a field of the form
    (`require_user` reads it), before any lookup; then the project (404 as for an unknown one)."""
    user = await run_db(get_ui_user, request)
    if user is None:
        raise LoginRequired()
    _admin(user)
    checked = await require_user(request)
    return Visible(checked, registry, await run_db(visible_record, registry, checked, project_id))


async def _fields(request: Request, *keys: str) -> list[str]:
    """The text fields of a small form (the form, and any file in it, closed after)."""
    async with request.form(max_files=0, max_fields=8) as form:
        return [_text(form, key) for key in keys]


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


def _file_name(raw: str | None) -> str:
    """The upload's own name, without any folders a client put in it."""
    name = PurePosixPath((raw or "").replace("\\", "/")).name.strip()
    return name[:MAX_FILE_NAME] or "upload"


def _wants_json(request: Request) -> bool:
    return request.headers.get("accept", "").startswith("application/json")


def _file_limit(request: Request) -> int:
    return app_state(request.app).services.knowledge.limits.max_file_bytes  # STEAMHARNESS_MAX_FILE_BYTES


# The session and the role are checked by `uploader`, before a byte of the body is read.
@router.post(
    "/projects/{project_id}/knowledge/upload",
    summary="Upload documents into a collection",
    dependencies=[declared(Policy.ADMIN)],
)
async def upload(
    request: Request, project: Annotated[Visible, Depends(uploader)], service: KnowledgeDep
) -> Response:
    project_id = project.record.id
    limit = _file_limit(request)
    # The guard bounds the whole body (webui.edge.guard: LARGE_BODY_PATH); each file is bounded here.
    async with request.form(max_files=MAX_UPLOAD_FILES, max_fields=16) as form:
        # A form-field CSRF token means the session check has read the form already; leaving
        # here closes its spooled files either way.
        collection = _text(form, "collection")
        title = _text(form, "title") or None
        raw_meta = _text(form, "metadata")
        files = [
            (_file_name(f.filename), await f.read(limit + 1))
            for f in form.getlist("files")
            if isinstance(f, UploadFile) and f.filename
        ]
    actor = request_actor(request, project.user.actor, "ui")
    problem = None
    metadata: Any = None
    if not collection:
        problem = "choose the collection to add the files to"
    elif not files:
        problem = "choose one or more files to upload"
    elif raw_meta:
        try:
            meta = raw_meta.encode()
            metadata = await run_parse(
                len(meta), parse_json, meta, what="metadata", error=KnowledgeRefused, limits=KNOWLEDGE_JSON
            )
        except KnowledgeRefused as exc:
            problem = exc.message
    results: list[FileResult] = []
    if problem is None:
        for name, data in files:
            if len(data) > limit:
                results.append(FileResult(name, error=f"{name}: larger than the {limit} bytes a file may be"))
                continue
            try:
                check_name(collection)  # before the file is read
                # Read in a bounded child during one of the account's turns, before any database work.
                file = await service.reader.read(name, data, account=project.user.actor)
                view = await service.add_async(
                    project_id,
                    collection,
                    actor=actor,
                    account=project.user.actor,
                    file=file,
                    title=title,
                    metadata=metadata,
                )
            except (
                KnowledgeRefused,
                KnowledgeFull,
                TooManyExtractions,
                EmbeddingsThrottled,
                EmbeddingsFailed,
            ) as exc:
                message = exc.message if exc.message.startswith(name) else f"{name}: {exc.message}"
                results.append(FileResult(name, error=message))
            else:
                results.append(FileResult(name, status=view["status"], doc_id=view["id"]))
    failed = problem is not None or any(r.error for r in results)
    if _wants_json(request):
        body = {"error": problem, "results": [r.view() for r in results]}
        return JSONResponse(body, status_code=422 if failed else 200)
    if failed:
        return await _render(
            request, project, status_code=422, error=problem or "Some files were not added.", results=results
        )
    return RedirectResponse(page_url(project_id, done="uploaded"), status_code=303)


async def _write(
    request: Request, project: Any, action: Any, done: str, *, blocking: bool = True
) -> Response:
    """`action` (blocking: in a database thread; else awaited), then back to the page."""
    try:
        await (run_db(action) if blocking else action())
    except (KnowledgeRefused, KnowledgeFull, NotFound) as exc:
        return await _render(
            request, project, status_code=exc.status if exc.status != 404 else 409, error=exc.message
        )
    return RedirectResponse(page_url(project.record.id, done=done), status_code=303)


@router.post("/projects/{project_id}/knowledge/remove", summary="Remove a knowledge-base document")
async def remove_document(request: Request, project: VisibleDep, service: KnowledgeDep) -> Response:
    _admin(project.user)
    [doc_id] = await _fields(request, "id")
    actor = request_actor(request, project.user.actor, "ui")

    def action() -> None:
        if not service.remove(project.record.id, doc_id, actor=actor):
            raise NotFound(f"document {doc_id!r} not found")

    return await _write(request, project, action, "removed")


@router.post("/projects/{project_id}/knowledge/collections", summary="Create a knowledge-base collection")
async def create_collection(request: Request, project: VisibleDep, service: KnowledgeDep) -> Response:
    _admin(project.user)
    name, language = await _fields(request, "name", "language")
    actor = request_actor(request, project.user.actor, "ui")
    return await _write(
        request,
        project,
        lambda: service.create_collection(project.record.id, name, language=language or None, actor=actor),
        "created",
    )


@router.post(
    "/projects/{project_id}/knowledge/collections/remove", summary="Remove a knowledge-base collection"
)
async def remove_collection(request: Request, project: VisibleDep, service: KnowledgeDep) -> Response:
    _admin(project.user)
    [name] = await _fields(request, "name")
    actor = request_actor(request, project.user.actor, "ui")
    return await _write(
        request,
        project,
        lambda: service.remove_collection_async(project.record.id, name, actor=actor),
        "collection-removed",
        blocking=False,
    )
