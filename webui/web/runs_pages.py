"""Runs: the list (filtered by project, status and source; keyset-paged) and the run page.

The full report (stdout, stderr, ctx.log lines) is shown only to administrators and to the
person who started the run; everyone who may use the project sees params, status, the
state timeline, output or error. Runs of other projects are 404, never 403, so
their ids are not confirmed to exist.

A request the handler made of its MCP client (`ctx.sample`, `ctx.roots`) and the answer are
timeline entries: everyone sees what was asked and what came back (sizes, the model, how
many roots); their words (the prompt, the reply, the roots' URIs) only whoever sees the
report, as only they see the run's questions.

The secret values of the configuration the run started with are redacted
(`webui.configs.redaction`) from what anyone but the run's own account sees: params,
output, error, timeline (administrators included: they export an account's secrets
explicitly when they need them, audited). Log lines are redacted for everyone, the owner
too: a log is copied and shared more readily than a result. `shown_run` and `shown_event`
are the one place both rules are applied, for this page, `/api/runs/{id}` and the
conversation view."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.engine import Engine

from webui.auth.keys import Principal
from webui.auth.ui import UiUser
from webui.configs.redaction import NO_REDACTION, Redaction
from webui.errors import NotFound
from webui.files.download import download_path
from webui.interactions.client_requests import ANSWERED_ENTRY, ASKED_ENTRY, is_client_request
from webui.interactions.owner import Party
from webui.store import projects as project_store
from webui.store import runs as run_store
from webui.store.models import ProjectRecord, Run, RunEvent
from webui.web.deps import ServicesDep, UserDep
from webui.web.templating import page

router = APIRouter(tags=["pages"])

PAGE_SIZE = 50
STATUSES = (*run_store.ACTIVE_STATUSES, *run_store.FINAL_STATUSES)
# The channels that start runs; the filter also keeps any other value it is given.
SOURCES = ("mcp", "api", "ui")
# "child"/"parent": the links between a run and the child runs it started through ctx.related;
# a request to the MCP client and its answer.
TIMELINE_KINDS = frozenset({"state", "child", "parent", ASKED_ENTRY, ANSWERED_ENTRY})
# What of those two entries is the conversation's own words (shown with the report only).
CLIENT_WORDS = ("firstText", "replyText", "uris")


@dataclass(frozen=True)
class RunRedaction:
    """What hides a run's secrets from one viewer: `result` for params, output, error and
    the timeline (nothing for the run's own account), `logs` for log lines (always)."""

    result: Redaction
    logs: Redaction

    @staticmethod
    def of(services: Any, party: Party, run: Run) -> RunRedaction:
        secrets: Redaction = services.configs.run_redaction(run)
        return RunRedaction(NO_REDACTION if party.owns(run.account_id) else secrets, secrets)


def run_hider(services: Any, user: UiUser | None) -> Callable[[Run], Run]:
    """`run` as `user` may see its params, output and error (for views that show runs).
    Without `services` (a view built outside the app, in tests) runs are shown as they are."""
    if user is None or services is None:
        return lambda run: run
    party = Party.of_user(user)
    return lambda run: shown_run(run, RunRedaction.of(services, party, run).result)


def shown_run(run: Run, redaction: Redaction) -> Run:
    """`run` as a viewer may see it: a detached copy with params, output and error redacted."""
    if not redaction:
        return run
    copy = Run.model_validate(run.model_dump())
    copy.params = redaction.value(run.params)
    copy.output = redaction.value(run.output)
    copy.error = redaction.value(run.error)
    return copy


def shown_event(event: RunEvent, redaction: Redaction) -> RunEvent:
    if not redaction:
        return event
    copy = RunEvent.model_validate(event.model_dump())
    copy.text = redaction.text(event.text) if event.text is not None else None
    copy.data = redaction.value(event.data)
    return copy


def timeline_event(event: RunEvent, redaction: Redaction, *, words: bool) -> RunEvent:
    """A timeline entry as a viewer may see it: `words` False leaves out what a request to
    the MCP client and its answer said (`CLIENT_WORDS`)."""
    shown = shown_event(event, redaction)
    if words or event.kind not in (ASKED_ENTRY, ANSWERED_ENTRY) or not isinstance(shown.data, dict):
        return shown
    copy = RunEvent.model_validate(shown.model_dump())
    copy.data = {k: v for k, v in shown.data.items() if k not in CLIENT_WORDS}
    copy.data["wordsHidden"] = any(k in shown.data for k in CLIENT_WORDS)
    return copy


def readable_run(engine: Engine, run_id: str, reader: Principal | UiUser) -> Run:
    """The run, if `reader` may read it; `NotFound` otherwise, the same answer as for an
    unknown id. The one rule for reading a run (and the files it created), for the browser
    session (someone who may use its project: a grant, or an administrator) and for a Bearer
    key (`Principal.may_read`: a runs scope on a project its account may use, or the admin
    key): the run page, `GET /api/runs/{id}` and its files' downloads all ask here."""
    run = run_store.get_run(engine, run_id=run_id)
    allowed = reader.may_read if isinstance(reader, Principal) else reader.may_use
    if run is None or not allowed(run.project_id):
        raise NotFound(f"run {run_id!r} not found")
    return run


def get_run_or_404(run_id: str, user: UserDep, services: ServicesDep) -> Run:
    return readable_run(services.engine, run_id, user)


RunDep = Annotated[Run, Depends(get_run_or_404)]


@dataclass(frozen=True)
class CreatedFile:
    """A file the run created, as its page lists it: the name as this viewer may see it (the
    run's configuration secrets redacted for anyone but its account), size, type, and the
    download URL (`webui.files.download`; the same rule as reading the run)."""

    name: str
    size: int
    mime_type: str
    url: str


def created_files(services: Any, run: Run, redaction: Redaction) -> list[CreatedFile]:
    return [
        CreatedFile(redaction.text(row.name), row.size, row.mime_type, download_path(run.id, row.id))
        for row in services.files.outputs_of_run(run.id)
    ]


def may_see_report(user: UiUser, run: Run) -> bool:
    return user.is_admin or (run.actor is not None and run.actor == user.actor)


def usable_projects(user: UiUser, services: Any) -> list[ProjectRecord]:
    return [p for p in project_store.list_projects(services.engine) if user.may_use(p.id)]


def pretty(value: Any, indent: int | None = 2) -> str:
    """JSON for people: unescaped text (the template escapes it), never `\\u003c`."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


def swappable_page(request: Request, name: str, context: dict[str, Any], *, block: str) -> Response:
    """`page`, for URLs that htmx also loads as fragments (filters, polling). A history
    restore asks for the whole page (with HX-Request set), and caches must keep the two
    answers apart."""
    restoring = request.headers.get("hx-history-restore-request") == "true"
    response = page(request, name, context, block=None if restoring else block)
    response.headers["Vary"] = "HX-Request, HX-History-Restore-Request"
    return response


def runs_url(filters: dict[str, str], **extra: str) -> str:
    query = urlencode({k: v for k, v in {**filters, **extra}.items() if v})
    return f"/runs?{query}" if query else "/runs"


@router.get("/runs", summary="Runs of the projects you may use")
def runs_list(
    request: Request,
    user: UserDep,
    services: ServicesDep,
    project: Annotated[str, Query(max_length=100)] = "",
    status: Annotated[str, Query(max_length=40)] = "",
    source: Annotated[str, Query(max_length=40)] = "",
    before: Annotated[str, Query(max_length=100, description="Show runs older than this run id")] = "",
) -> Response:
    projects = usable_projects(user, services)
    allowed = {p.id for p in projects}
    if project:
        scope: set[str] | None = {project} & allowed
    else:
        scope = None if user.projects is None else allowed
    cursor = run_store.get_run(services.engine, run_id=before) if before else None
    if cursor is not None and not user.may_use(cursor.project_id):
        cursor = None  # never page relative to a run the user may not see
    rows = run_store.list_runs(
        services.engine,
        project_ids=scope,
        status=status or None,
        source=source or None,
        before=cursor,
        limit=PAGE_SIZE + 1,
    )
    runs, more = rows[:PAGE_SIZE], len(rows) > PAGE_SIZE
    filters = {"project": project, "status": status, "source": source}
    return swappable_page(
        request,
        "runs/list.html",
        {
            "runs": runs,
            "projects": projects,
            "project_names": {p.id: p.name for p in projects},
            "filters": filters,
            "statuses": STATUSES,
            "sources": SOURCES if not source or source in SOURCES else (*SOURCES, source),
            "older_url": runs_url(filters, before=runs[-1].id) if more else None,
            "newest_url": runs_url(filters) if cursor is not None else None,
        },
        block="results",
    )


@router.get("/runs/{run_id}", summary="A run: params, status, timeline, output or error, report")
def run_page(request: Request, run: RunDep, user: UserDep, services: ServicesDep) -> Response:
    events = run_store.list_events(services.engine, run_id=run.id)
    full = may_see_report(user, run)
    record = project_store.get_project(services.engine, project_id=run.project_id)
    hide = RunRedaction.of(services, Party.of_user(user), run)
    owner_view = run
    run = shown_run(run, hide.result)
    interaction = (
        services.interactions.pending_for_run(run.id)
        if Party.of_user(user).may_see(owner_view.account_id)
        else None
    )
    return swappable_page(
        request,
        "runs/detail.html",
        {
            "run": run,
            "params_json": pretty(run.params),
            "output_json": pretty(run.output),
            "files": created_files(services, run, hide.result),
            "pretty": pretty,
            "project_name": record.name if record else run.project_id,
            "active": run.status in run_store.ACTIVE_STATUSES,
            "timeline": [
                timeline_event(e, hide.result, words=full) for e in events if e.kind in TIMELINE_KINDS
            ],
            "report": [shown_event(e, hide.logs) for e in events if e.kind not in TIMELINE_KINDS]
            if full
            else None,
            # A pending question is shown (and linked) only to whoever may answer or see it.
            "interaction": interaction,
            # A sampling or roots request: only the MCP client that follows the run answers it.
            "for_client": interaction is not None and is_client_request(interaction.kind),
        },
        block="run",
    )
