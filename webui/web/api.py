"""JSON API: file uploads for tool params, runs and the files they created, and answering
interactions."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, BinaryIO, Literal

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from webui.audit.events import AuditName
from webui.auth.keys import AuthError, Forbidden, Principal
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.configs.redaction import NO_REDACTION
from webui.errors import InvalidAnswer, NotFound
from webui.files.download import HEADERS as DOWNLOAD_HEADERS
from webui.files.download import DownloadSlots, content_disposition, served_type
from webui.files.store import CHUNK as DOWNLOAD_CHUNK
from webui.files.store import FileTooLarge, check_mime_type
from webui.interactions.owner import Party
from webui.projects.registry import ProjectRegistry
from webui.store import runs as run_store
from webui.store.models import ManagedFile, Run
from webui.web.api_models import AnsweredAnswer, RunAnswer, StoredFiles, WhoAmIAnswer
from webui.web.deps import PrincipalDep, RegistryDep, ServicesDep, get_ui_user
from webui.web.json_body import ApiBody, RawBody, StrictBody
from webui.web.policies import API_KEY, API_KEY_OR_SESSION
from webui.web.runs_pages import RunRedaction, readable_run, shown_event, shown_run
from webui.web.security import check_csrf
from webui.web.state import Kept, app_state
from webui.web.streams import HeldStream

# Every route takes an API key sent in Authorization; the browser's file picker and a run
# page's download links the session instead (webui.web.policies).
router = APIRouter(prefix="/api", tags=["api"], dependencies=[API_KEY_OR_SESSION])


def file_json(row: ManagedFile) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "mimeType": row.mime_type,
        "size": row.size,
        "sha256": row.sha256,
        "createdAt": row.created_at.isoformat(),
    }


async def uploader(request: Request, registry: ProjectRegistry, project_id: str) -> str:
    """Who uploads: a Bearer key with run permission on the project (the guard has checked
    the key), or the browser session (the file picker) of someone who may use the project,
    with its CSRF token in `X-CSRF-Token`. Decided before a byte of the body is read."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        await run_db(registry.record, project_id)
        principal.require_run(project_id)
        return principal.actor
    user = await run_db(get_ui_user, request)
    if user is None:
        raise AuthError("missing Authorization: Bearer <API key> (or log in to use the browser session)")
    check_csrf(user.csrf_token, request.headers.get("x-csrf-token"))
    if not user.may_use(project_id):
        raise NotFound(f"project {project_id!r} is not registered")
    await run_db(registry.record, project_id)
    return user.actor


@router.post(
    "/workflows/{project_id}/files",
    summary="Upload a file for a tool's file param",
    status_code=201,
    response_model=StoredFiles,
    responses={
        400: {"description": "mimeType is not a `type/subtype` media type; nothing stored"},
        413: {"description": "Larger than 50 MB, or past the project's file quota; nothing stored"},
    },
)
async def upload_file(
    project_id: str,
    request: Request,
    services: ServicesDep,
    registry: RegistryDep,
    file_name: str = Query(alias="fileName", min_length=1, max_length=1000),
    mime_type: str | None = Query(default=None, alias="mimeType"),
    _: None = Depends(RawBody(("application/octet-stream",), binary=True)),  # streamed, read below
) -> JSONResponse:
    actor = await uploader(request, registry, project_id)
    if mime_type is not None:
        check_mime_type(mime_type)  # refused before a byte of the body is read
    limit = services.files.max_bytes
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limit:
        raise FileTooLarge(f"file is larger than the {limit // (1024 * 1024)} MB limit")
    row = await services.files.store_upload(
        project_id=project_id,
        chunks=request.stream(),
        name=file_name,
        mime_type=mime_type,
        actor=actor,
        declared_size=size,
    )
    return JSONResponse({"data": [file_json(row)]}, status_code=201)


def run_json(
    run: Run, services: Any, *, full: bool, questions: bool = True, hide: RunRedaction | None = None
) -> dict[str, Any]:
    """`questions`: include the pending question (only for whoever may see it); `hide`:
    the configuration secrets this viewer must not see (`runs_pages.RunRedaction`)."""
    logs = hide.logs if hide is not None else NO_REDACTION
    run = shown_run(run, hide.result) if hide is not None else run
    data: dict[str, Any] = {
        "runId": run.id,
        "projectId": run.project_id,
        "version": run.project_version,
        "entrypointId": run.entrypoint_id,
        "entrypointTitle": run.entrypoint_title,
        "source": run.source,
        "status": run.status,
        "createdAt": run.created_at.isoformat(),
        "startedAt": run.started_at.isoformat() if run.started_at else None,
        "finishedAt": run.finished_at.isoformat() if run.finished_at else None,
        "params": run.params,
        "parentRunId": run.parent_run_id,
        # Its OpenTelemetry span, when tracing was on.
        "trace": {"traceId": run.trace_id, "spanId": run.span_id} if run.trace_id else None,
        # The configuration the run started with: name and revision, never its values.
        "configuration": (
            {"name": run.config_name, "revision": run.config_revision}
            if run.config_name is not None
            else None
        ),
    }
    if run.status == "success":
        data["output"] = run.output
    elif run.error is not None:
        data["error"] = run.error
    pending = services.interactions.pending_for_run(run.id) if questions else None
    if pending is None and questions and run.status == "waiting_for_child":
        # the question of the child run this run waits on (asked of the same person)
        child = run_store.waiting_descendant(services.engine, run_id=run.id)
        pending = services.interactions.pending_for_run(child) if child else None
    if pending is not None and pending.run_id == run.id and run.status != "waiting_for_input":
        # The run was read before its question was asked (the two reads are apart): the run
        # says `waiting_for_input` before its question exists, so a second read says it too,
        # unless the question was answered meanwhile, and then it is not shown.
        fresh = run_store.get_run(services.engine, run_id=run.id)
        if fresh is not None and fresh.status == "waiting_for_input":
            data["status"] = fresh.status
        else:
            pending = None
    if pending is not None:
        data["interaction"] = {
            "interactionId": pending.id,
            "runId": pending.run_id,
            "kind": pending.kind,
            "title": pending.title,
            "message": pending.message,
            "fields": pending.fields,
            "requestedSchema": pending.requested_schema,
        }
    if full:
        data["events"] = [
            {
                "kind": e.kind,
                "source": e.source,
                "text": e.text,
                "data": e.data,
                "at": e.created_at.isoformat(),
            }
            for e in (shown_event(e, logs) for e in run_store.list_events(services.engine, run_id=run.id))
        ]
    return data


@router.get(
    "/whoami",
    summary="Who the Bearer key is: checks a key without doing anything with it",
    response_model=WhoAmIAnswer,
    dependencies=[API_KEY],
    responses={401: {"description": "No key, or one the server does not accept"}},
)
def whoami(principal: PrincipalDep) -> dict[str, Any]:
    return {
        "data": {
            "kind": principal.kind,
            "actor": principal.actor,
            "keyId": principal.key_id,
            "scopes": sorted(principal.scopes),
            "projects": None if principal.projects is None else sorted(principal.projects),
        }
    }


@router.get(
    "/runs/{run_id}",
    summary="A run's status, output or error, and any pending interaction",
    response_model=RunAnswer,
    response_model_exclude_unset=True,
    dependencies=[API_KEY],
)
def get_run(run_id: str, principal: PrincipalDep, services: ServicesDep) -> dict[str, Any]:
    run = readable_run(services.engine, run_id, principal)
    party = Party.of_principal(principal)
    hide = RunRedaction.of(services, party, run)
    full = principal.kind == "admin"
    return {"data": run_json(run, services, full=full, questions=party.may_see(run.account_id), hide=hide)}


async def run_reader(request: Request) -> tuple[Principal | UiUser, str]:
    """Who reads a run, and the audit source: a Bearer key (the guard has checked it), or
    the browser session (a GET: no CSRF token to check); 401 with neither."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return principal, "api"
    user = await run_db(get_ui_user, request)
    if user is None:
        raise AuthError("missing Authorization: Bearer <API key> (or log in to use the browser session)")
    return user, "ui"


def created_file(
    services: Any, run_id: str, file_id: str, reader: Principal | UiUser
) -> tuple[ManagedFile, str]:
    """A file the run created, for whoever may read the run (`readable_run`), and its name as
    `reader` may see it (the run's configuration secrets redacted for anyone but its account,
    as on the run page); 404 otherwise, and for a file of another run."""
    run = readable_run(services.engine, run_id, reader)
    row = services.files.get(file_id)
    if row is None or row.origin != "output" or row.run_id != run.id:
        raise NotFound(f"file {file_id!r} not found")
    party = Party.of_principal(reader) if isinstance(reader, Principal) else Party.of_user(reader)
    return row, RunRedaction.of(services, party, run).result.text(row.name)


DOWNLOAD_SLOTS = Kept(lambda state: DownloadSlots(state.settings.max_downloads_per_account))


def download_slots(request: Request) -> DownloadSlots:
    """The process's per-account cap on downloads under way (made at first use)."""
    return DOWNLOAD_SLOTS.of(app_state(request.app))


def open_stored(path: str) -> BinaryIO | None:
    """The stored file opened for reading, or None when it is gone or no regular file (never
    waiting on one, a FIFO say). Opened before the response begins, so what its 200 announces
    (the length) is what is sent, even if the file is removed meanwhile."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


async def _file_chunks(f: BinaryIO, size: int) -> AsyncIterator[bytes]:
    """`size` bytes of the open file a chunk at a time, each read in a thread: never whole in
    memory, never more than the Content-Length announced."""
    left = size
    while left > 0 and (chunk := await anyio.to_thread.run_sync(f.read, min(DOWNLOAD_CHUNK, left))):
        left -= len(chunk)
        yield chunk


@router.get(
    "/runs/{run_id}/files/{file_id}",
    summary="Download a file the run created (always an attachment)",
    description=(
        "The file's bytes, streamed, for whoever may read the run (`GET /api/runs/{run_id}`): a "
        "Bearer key or the browser session. Always `Content-Disposition: attachment`; HTML, SVG, "
        "XML and script types are sent as `application/octet-stream`, with `nosniff` and a "
        "sandboxing Content-Security-Policy. A tool result over HTTP links each created file here "
        "(a `resource_link` content item)."
    ),
    response_class=Response,
    responses={
        200: {
            "description": "The file, as an attachment",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        },
        401: {"description": "No key and no browser session"},
        404: {"description": "Unknown run or file, or a run you may not read (never 403)"},
        429: {"description": "Your account already has `STEAMHARNESS_MAX_DOWNLOADS_PER_ACCOUNT` under way"},
    },
)
async def download_created_file(
    run_id: Annotated[str, PathParam(max_length=100)],
    file_id: Annotated[str, PathParam(max_length=100)],
    request: Request,
    services: ServicesDep,
) -> Response:
    reader, source = await run_reader(request)
    row, name = await run_db(created_file, services, run_id, file_id, reader)
    release = download_slots(request).take(reader.actor)  # TooManyDownloads: 429
    f: BinaryIO | None = None

    def done() -> None:
        release()
        if f is not None:
            f.close()

    try:
        f = await anyio.to_thread.run_sync(open_stored, row.storage)
        if f is None:
            raise NotFound(f"file {file_id!r} is no longer stored")
        return await _download(request, services, row, name, reader, source, f, done)
    except BaseException:
        done()
        raise


async def _download(
    request: Request,
    services: Any,
    row: ManagedFile,
    name: str,
    reader: Principal | UiUser,
    source: str,
    f: BinaryIO,
    done: Callable[[], None],
) -> Response:
    size = os.fstat(f.fileno()).st_size
    await run_db(
        lambda: services.audit.record_alone(
            services.engine,
            AuditName.FILE_DOWNLOADED,
            actor=reader.actor,
            project_id=row.project_id,
            run_id=row.run_id,
            source=source,
            outcome="ok",
            client_address=request.client.host if request.client else None,
            user_agent=request.headers.get("user-agent"),
            details={"fileId": row.id, "size": size},
        )
    )
    headers = {
        **DOWNLOAD_HEADERS,
        # As stored, without a charset the server cannot know (Starlette adds one to text/*).
        "Content-Type": served_type(row.mime_type),
        "Content-Disposition": content_disposition(name),
        "Content-Length": str(size),
    }
    return HeldStream(_file_chunks(f, size), done, headers=headers)


class AnswerBody(ApiBody):
    """An answer: what is wrong with one is said without pydantic's internals (input values, links)."""

    invalid = InvalidAnswer
    prefix = "the answer is not valid: "

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    override: bool = Field(
        default=False,
        description="Server admin key only: answer a question that belongs to an account, "
        "as administrator. Recorded in the audit log; without it such an answer is 403.",
    )


@router.post(
    "/interactions/{interaction_id}/answer",
    summary="Answer a pending interaction of your own run (resumes it)",
    response_model=AnsweredAnswer,
    dependencies=[API_KEY],
    responses={
        403: {"description": "The server admin key, for an account's question, without `override`"},
        404: {"description": "Unknown, or not yours: another account's questions are not shown"},
    },
)
async def answer_interaction(
    interaction_id: str, principal: PrincipalDep, body: StrictBody[AnswerBody], services: ServicesDep
) -> dict[str, Any]:
    ia = await run_db(services.interactions.get, interaction_id)
    run = await run_db(run_store.get_run, services.engine, run_id=ia.run_id) if ia.run_id else None
    party = Party.of_principal(principal)
    if run is None or not principal.may_read(run.project_id) or not party.may_see(run.account_id):
        raise NotFound(f"interaction {interaction_id!r} not found")
    if not principal.may_run(run.project_id):
        raise Forbidden("answering needs run permission on the project (runs.create)")
    answer = await services.interactions.answer(
        interaction_id,
        action=body.action,
        content=body.content,
        channel="api",
        by=party,
        override=body.override,
    )
    return {
        "data": {
            "interactionId": answer.interaction_id,
            "runId": answer.run_id,
            "action": answer.action,
            "repeated": answer.repeated,
        }
    }
