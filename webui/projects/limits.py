"""The limits a project's new runs are admitted under: its run gate and queue limits (its
record's, else the server's defaults), read fresh before every start, in one place for a
client's tool call and for a handler's child run."""

from __future__ import annotations

from webui.projects.registry import ProjectRegistry, Resolved
from webui.runs.types import RunLimits, RunRefused
from webui.store.models import ProjectRecord

DRAFT_CHANGED = "The project's draft changed since this session started; reconnect to use the new draft."


class ProjectLimits:
    def __init__(
        self, registry: ProjectRegistry, *, default_max_running: int | None, default_max_queued: int | None
    ) -> None:
        self.registry = registry
        self.default_max_running = default_max_running
        self.default_max_queued = default_max_queued

    def limits_for(self, resolved: Resolved) -> RunLimits:
        """The limits of a run of `resolved` (blocking: a database read, a draft's hash).
        RunRefused (`draft_changed`) when it is a draft that changed since it was resolved."""
        pid = resolved.project.id
        if resolved.target.kind == "draft" and self.registry.draft_revision(pid) != resolved.revision:
            raise RunRefused("draft_changed", DRAFT_CHANGED)
        return self.of(self.registry.record(pid))

    def of(self, record: ProjectRecord) -> RunLimits:
        """The limits `record` sets, the server's defaults where it sets none."""
        return RunLimits(
            gate_open=record.run_gate_open,
            max_running=record.max_running if record.max_running is not None else self.default_max_running,
            max_queued=record.max_queued if record.max_queued is not None else self.default_max_queued,
        )
