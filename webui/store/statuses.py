"""The statuses of a run, and what each one means for its slot and its end."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Stored in `Run.status`; compares equal to its value."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_CHILD = "waiting_for_child"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"

    @property
    def final(self) -> bool:
        """The run has ended; its status never changes again."""
        return self in _FINAL

    @property
    def holds_slot(self) -> bool:
        """Only a running run holds one of the worker slots: a run waiting for a person or
        for its child runs keeps its worker process but gives its slot up."""
        return self is RunStatus.RUNNING

    @property
    def waiting(self) -> bool:
        return self in (RunStatus.WAITING_FOR_INPUT, RunStatus.WAITING_FOR_CHILD)


_FINAL = frozenset({RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMEOUT})

# As plain strings, for queries (a database driver need not know the enum).
ACTIVE_STATUSES = tuple(s.value for s in RunStatus if not s.final)
FINAL_STATUSES = tuple(s.value for s in RunStatus if s.final)
HOLDING_STATUSES = tuple(s.value for s in RunStatus if s.holds_slot)
# Past its admission: a run resuming after its wait is admitted again from these.
RESUMABLE_STATUSES = tuple(s.value for s in RunStatus if s.holds_slot or s.waiting)
