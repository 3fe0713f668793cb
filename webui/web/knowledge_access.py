"""Who uses a project's knowledge base over the JSON API (`webui.web.knowledge_api`): the
caller, as a dependency each route declares before its body (so who is asking is decided
before a byte of the body is read), and the shapes its routes share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request

from webui.auth.keys import AuthError, Forbidden, Principal
from webui.blocking import run_db
from webui.errors import NotFound
from webui.knowledge.model import DOC_ID_RE, MAX_JSON_CONTAINERS, MAX_JSON_VALUES, NAME_RE, Actor
from webui.projects.registry import ProjectRegistry
from webui.web.deps import UNSAFE_METHODS, RegistryDep, get_ui_user
from webui.web.json_body import Limits
from webui.web.security import check_csrf

SCOPE = "knowledge"
# Every JSON these routes read: a body, an import's line, a filter or metadata field.
KNOWLEDGE_JSON = Limits(values=MAX_JSON_VALUES, containers=MAX_JSON_CONTAINERS)


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


async def caller_of(request: Request, registry: ProjectRegistry, project_id: str, *, write: bool) -> Caller:
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
    await run_db(registry.record, project_id)  # 404 when unknown
    if write and not caller.may_write:
        raise Forbidden(caller.refusal)
    return caller


async def knowledge_reader(request: Request, project_id: str, registry: RegistryDep) -> Caller:
    return await caller_of(request, registry, project_id, write=False)


async def knowledge_writer(request: Request, project_id: str, registry: RegistryDep) -> Caller:
    return await caller_of(request, registry, project_id, write=True)


Reader = Annotated[Caller, Depends(knowledge_reader)]
Writer = Annotated[Caller, Depends(knowledge_writer)]


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
