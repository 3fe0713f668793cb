"""A run's end as the run service records it: the outcome its conclusion says (or, with
none, that it ended without one), the outcome record's fields (a call's end is the run's own
`run.finished`, with the call in its fields) and its span's end."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import StatusCode

from webui.runs.live import LiveRun
from webui.runs.types import RunStatus
from webui.store.models import utcnow

NO_OUTCOME = {"code": "internal", "message": "The run ended without an outcome."}
INTERNAL = {"code": "internal", "message": "The run failed inside the server."}

Outcome = tuple[RunStatus, Any, dict[str, Any] | None]


def outcome_of(live: LiveRun) -> Outcome:
    """(status, output, error) of the run's conclusion; a run ending without one failed."""
    live.conclude(RunStatus.FAILED, NO_OUTCOME)  # kept only if nothing concluded it
    assert live.conclusion is not None
    status, detail = live.conclusion
    if status == RunStatus.SUCCESS:
        return status, detail.get("output"), None
    return status, None, detail


def final_fields(live: LiveRun, outcome: Outcome) -> dict[str, Any]:
    """The outcome record's fields (webui.runs.outcomes `FINAL`)."""
    status, output, error = outcome
    req = live.request
    fields: dict[str, Any] = {
        "status": status.value,
        "output": output,
        "error": error,
        "finished_at": utcnow(),
        "source": req.source,
        "audit": req.audit_fields(live.run_id),
        "close_questions": live.asks.asked,
        "files": list(live.created),  # for watchers while it waits; not written
    }
    return fields


def end_span(live: LiveRun, status: RunStatus, error: dict[str, Any] | None) -> None:
    live.span.set_attribute("steamharness.run.status", status.value)
    if status != RunStatus.SUCCESS:
        live.span.set_status(StatusCode.ERROR, str((error or {}).get("code") or status.value))
    live.span.end()
