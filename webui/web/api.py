"""JSON API: file uploads for tool params, runs, and answering interactions."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from webui.auth.keys import AuthError, Forbidden, Principal
from webui.blocking import run_db
from webui.configs.redaction import NO_REDACTION
from webui.errors import InvalidAnswer, NotFound
from webui.files.store import FileTooLarge, check_mime_type
from webui.interactions.owner import Party
from webui.projects.registry import ProjectRegistry
from webui.store import runs as run_store
from webui.store.models import ManagedFile, Run
from webui.web.deps import PrincipalDep, RegistryDep, ServicesDep, get_ui_user
from webui.web.json_body import json_object
from webui.web.runs_pages import RunRedaction, shown_event, shown_run
from webui.web.security import check_csrf

router = APIRouter(prefix="/api", tags=["api"])


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
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
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


@router.get("/runs/{run_id}", summary="A run's status, output or error, and any pending interaction")
def get_run(run_id: str, principal: PrincipalDep, services: ServicesDep) -> dict[str, Any]:
    run = run_store.get_run(services.engine, run_id=run_id)
    if run is None or not principal.may_read(run.project_id):
        raise NotFound(f"run {run_id!r} not found")
    party = Party.of_principal(principal)
    hide = RunRedaction.of(services, party, run)
    full = principal.kind == "admin"
    return {"data": run_json(run, services, full=full, questions=party.may_see(run.account_id), hide=hide)}


class AnswerBody(BaseModel):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    override: bool = Field(
        default=False,
        description="Server admin key only: answer a question that belongs to an account, "
        "as administrator. Recorded in the audit log; without it such an answer is 403.",
    )


def answer_body(doc: dict[str, Any]) -> AnswerBody:
    """The body read by the strict reader, then checked; what is wrong, without pydantic's
    internals (input values, links)."""
    try:
        return AnswerBody.model_validate(doc)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidAnswer(f"the answer is not valid: {problems}") from None


@router.post(
    "/interactions/{interaction_id}/answer",
    summary="Answer a pending interaction of your own run (resumes it)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": AnswerBody.model_json_schema()}},
        }
    },
    responses={
        403: {"description": "The server admin key, for an account's question, without `override`"},
        404: {"description": "Unknown, or not yours: another account's questions are not shown"},
    },
)
async def answer_interaction(
    interaction_id: str, request: Request, principal: PrincipalDep, services: ServicesDep
) -> dict[str, Any]:
    body = answer_body(await json_object(request))
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
