"""Run records the database could not take when they were made, kept until it can.

A run's own records — its status changes, its timeline, its outcome and the audit events
about it — are written as the run goes. When the database cannot take one (locked past its
busy timeout, its disk full: `StoreUnavailable`, or its connection lost), the record is kept
here instead, and so is every later record of that run, in order behind it. One retry loop
writes them, oldest first, with a growing pause between failed attempts, for as long as it
takes: an outcome is never dropped because a lock or a full disk lasted longer than some
number of attempts. Meanwhile the run service answers the run's watchers from memory and
frees its worker slot.

Memory is bounded: timeline entries (status changes, log lines, progress) are kept up to
`max_bytes` in all; past that they are counted, and the run's timeline says how many were
not recorded. Outcomes and audit events are always kept: there is at most one outcome per
run the server drove, and the run service refuses new runs while the backlog is over its
budget (`over_budget`).

At shutdown the loop gets a bounded time to finish (`close`); what it could not write is
appended to a file in the data dir (`pending-run-records.jsonl`, the owner's alone), which
the next start writes before it marks orphaned runs interrupted (`replay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db, unavailable
from webui.errors import StoreUnavailable
from webui.events import EventHub
from webui.interactions.service import InteractionService
from webui.observability.metrics import METRICS
from webui.runs.timeline import BatchLimits, Entry, Timeline
from webui.store import runs as run_store

log = logging.getLogger(__name__)

PENDING_FILE = "pending-run-records.jsonl"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Pauses between failed attempts: doubling from the first to the last, then staying there.
FIRST_PAUSE_SECONDS = 0.05
LAST_PAUSE_SECONDS = 5.0
# Record fields that hold times (stored as ISO 8601 text in the spill file).
TIME_FIELDS = ("started_at", "finished_at", "created_at")
# Kinds of record, and which of them are never dropped.
EVENT, STATUS, FINAL, AUDIT = "event", "status", "final", "audit"
ALWAYS_KEPT = (FINAL, AUDIT)
# An outcome in the database may be replaced by a kept one only if it says this.
REPLACEABLE_CODES = ("interrupted",)


@dataclass
class Record:
    """One write of a run's records, as data (so it can wait in memory or in a file).

    `event`: a timeline entry (run_store.add_event's fields); `status`: a status change
    (run_store.update_run's); `final`: the outcome, with `audit` (the `run.finished`
    event's fields), `close_questions` and, for watchers only, `files`; `audit`: an audit
    event of its own (`event` plus AuditLog.record's fields)."""

    kind: str
    run_id: str
    fields: dict[str, Any]
    size: int = 0

    def to_json(self) -> str:
        fields = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in self.fields.items()}
        return json.dumps({"kind": self.kind, "runId": self.run_id, "fields": fields}, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Record:
        doc = json.loads(line)
        fields = dict(doc["fields"])
        for name in TIME_FIELDS:
            if isinstance(fields.get(name), str):
                fields[name] = datetime.fromisoformat(fields[name])
        return cls(str(doc["kind"]), str(doc["runId"]), fields, len(line))


def is_unavailable(exc: BaseException) -> bool:
    """The database could not take a write now, and may later: locked, full, or gone (a
    lost connection); anything else is a record it will never take."""
    return unavailable(exc) is not None or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


@dataclass
class _Totals:
    kept: int = 0
    written: int = 0
    failed_attempts: int = 0
    lost: Counter[str] = field(default_factory=Counter)


class RunRecordBacklog:
    """The records waiting for the database, oldest first, and the loop that writes them."""

    def __init__(
        self,
        *,
        engine: Engine,
        audit: AuditLog,
        interactions: InteractionService,
        hub: EventHub,
        spill_path: Path | None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeline: BatchLimits | None = None,
    ) -> None:
        """`spill_path`: where what is left at shutdown goes (None: a process that keeps no
        data dir; what is left is then logged as lost). `timeline`: when a run's batch of
        timeline entries is written."""
        self.engine = engine
        self.audit = audit
        self.interactions = interactions
        self.hub = hub
        self.spill_path = spill_path
        self.max_bytes = max_bytes
        self._queue: deque[Record] = deque()
        self._held: Counter[str] = Counter()  # run id -> records of it in the queue
        self._bytes = 0
        self._finals: dict[str, Record] = {}
        self._drained: dict[str, asyncio.Event] = {}  # run id -> set once none of it waits
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.totals = _Totals()
        # A run's chatty timeline entries, written in batches (webui.runs.timeline).
        self.timeline = Timeline(self._write_entries, timeline)

    # ----------------------------------------------------------------- what is kept
    def holds(self, run_id: str) -> bool:
        """Records of this run wait here: its later records must queue behind them."""
        return self._held[run_id] > 0

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def over_budget(self) -> bool:
        return self._bytes > self.max_bytes

    def final(self, run_id: str) -> Record | None:
        """A run's outcome not written yet (what a watcher is told meanwhile)."""
        return self._finals.get(run_id)

    def keep(self, record: Record, reason: BaseException | None = None) -> None:
        """Queue `record` behind everything kept before it, and make sure the loop runs."""
        if not record.size:
            record.size = len(record.to_json())
        if record.kind not in ALWAYS_KEPT and self._bytes + record.size > self.max_bytes:
            self.totals.lost[record.run_id] += 1
            return
        if record.kind == FINAL:
            lost = self.totals.lost.pop(record.run_id, 0)
            if lost:
                note = f"{lost} timeline entries were not recorded: the database was unavailable."
                source = record.fields.get("source") or "mcp"
                self._push(Record(EVENT, record.run_id, {"kind": "log", "text": note, "source": source}))
            self._finals[record.run_id] = record
        self._push(record)
        if reason is not None:
            METRICS.db_busy.labels("run_record").inc()
            log.warning(
                "run %s: its %s record is kept in memory until the database takes it (%s)",
                record.run_id,
                record.kind,
                _describe(reason),
            )
        self._start()

    def _push(self, record: Record) -> None:
        if not record.size:
            record.size = len(record.to_json())
        self._queue.append(record)
        self._held[record.run_id] += 1
        self._bytes += record.size
        self.totals.kept += 1
        self._wake.set()

    def _pop(self) -> Record:
        record = self._queue.popleft()
        self._held[record.run_id] -= 1
        if not self._held[record.run_id]:
            del self._held[record.run_id]
            drained = self._drained.pop(record.run_id, None)
            if drained is not None:
                drained.set()
        self._bytes -= record.size
        if record.kind == FINAL and self._finals.get(record.run_id) is record:
            del self._finals[record.run_id]
        return record

    async def wait_written(self, run_id: str, timeout: float) -> bool:
        """Wait (at most `timeout` seconds) until no record of this run waits here: a write
        that must not overtake them (a question) goes after them. False: they still wait."""
        await self.timeline.flush(run_id)
        if not self.holds(run_id):
            return True
        drained = self._drained.setdefault(run_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained.wait(), timeout)
        return not self.holds(run_id)

    async def write_or_keep(self, record: Record) -> None:
        """Write `record` now, unless records of its run already wait (then it waits behind
        them) or the database cannot take it (then it is kept). A timeline entry of a chatty
        kind joins its run's batch instead (webui.runs.timeline); any other record is written
        after that batch. The caller writes a run's records one at a time (RunService holds
        the run's writes lock)."""
        if record.kind == EVENT and self.timeline.batched(record):
            await self.timeline.add(record)
            return
        await self.timeline.flush(record.run_id)
        if self.holds(record.run_id):
            self.keep(record)
            return
        try:
            await run_db(self.apply, record)
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            self.keep(record, exc)

    async def _write_entries(self, entries: list[Entry]) -> None:
        """A batch of one run's timeline entries in one transaction, or, while the database
        cannot take it, each kept in order (behind whatever of the run is kept already)."""
        records = [Record(EVENT, e.run_id, e.fields) for e in entries]
        run_id = records[0].run_id
        if self.holds(run_id):
            for record in records:
                self.keep(record)
            return
        try:
            await run_db(
                run_store.add_events, self.engine, run_id=run_id, entries=[r.fields for r in records]
            )
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            for i, record in enumerate(records):
                self.keep(record, exc if i == 0 else None)

    async def audit_event(self, event: str, **fields: Any) -> None:
        """An audit event of its own (e.g. the MCP call's `tool.completed`), kept like a
        run's records when the database cannot take it; behind the run's records if any."""
        run_id = str(fields.get("run_id") or "")
        await self.write_or_keep(Record(AUDIT, run_id, {"event": event, **fields}))

    # ----------------------------------------------------------------- writing
    def apply(self, record: Record) -> None:
        """Write one record (blocking: in a database thread)."""
        f = dict(record.fields)
        if record.kind == EVENT:
            run_store.add_event(self.engine, run_id=record.run_id, **f)
        elif record.kind == STATUS:
            status = f.pop("status")
            run_store.update_run(self.engine, run_id=record.run_id, status=status, event_text=status, **f)
        elif record.kind == FINAL:
            self._apply_final(record.run_id, f)
        elif record.kind == AUDIT:
            self.audit.record_alone(self.engine, f.pop("event"), **f)
        else:
            raise ValueError(f"unknown kind of run record {record.kind!r}")

    def _apply_final(self, run_id: str, f: dict[str, Any]) -> None:
        fields = dict(f["audit"])
        status = str(f["status"])
        error = f.get("error")

        def audit(s: Any) -> None:
            self.audit.record(
                s,
                AuditName.RUN_FINISHED,
                **fields,
                outcome=status,
                details={"code": error.get("code")} if error else None,
            )
            call = f.get("call_audit")
            if call:  # a call's own end spilled by a server from before one row per fact
                call = dict(call)
                self.audit.record(s, AuditName(call.pop("event")), **call)

        written = run_store.finish_run(
            self.engine,
            run_id=run_id,
            may_replace=_may_replace,
            status=status,
            output=f.get("output"),
            error=error,
            finished_at=f["finished_at"],
            event_text=status,
            source=str(f.get("source") or "mcp"),
            audit=audit,
        )
        if written and f.get("close_questions"):
            self.interactions.close_for_run(run_id)

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush(), name="run-record-backlog")

    async def _flush(self) -> None:
        pause = FIRST_PAUSE_SECONDS
        attempt = 0
        while self._queue:
            record = self._queue[0]
            try:
                await run_db(self.apply, record)
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception(
                        "run %s: its %s record cannot be written; dropped", record.run_id, record.kind
                    )
                    self._pop()
                    continue
                attempt += 1
                self.totals.failed_attempts += 1
                METRICS.db_busy.labels("retry").inc()
                log.warning(
                    "run %s: the database is still unavailable (%s); %d records kept, retrying (attempt %d)",
                    record.run_id,
                    _describe(exc),
                    len(self._queue),
                    attempt,
                )
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)  # or sooner: a new record
                pause = min(pause * 2, LAST_PAUSE_SECONDS)
                continue
            self._pop()
            self.totals.written += 1
            if attempt:
                log.info("run %s: its kept %s record is written", record.run_id, record.kind)
            pause, attempt = FIRST_PAUSE_SECONDS, 0
            if record.kind == FINAL:
                project = record.fields.get("audit", {}).get("project_id")
                self.hub.publish(
                    "runs", "status", runId=record.run_id, projectId=project, status=record.fields["status"]
                )

    # ----------------------------------------------------------------- shutdown, next start
    async def close(self, timeout: float) -> None:
        """Give the loop `timeout` seconds to write what is kept; spill the rest to the file."""
        await self.timeline.close()  # the runs' last batches first
        if self._queue:
            self._start()
            self._wake.set()  # try again now rather than after the current pause
            task = self._task
            if task is not None:
                await asyncio.wait([task], timeout=timeout)
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._queue:
            self._spill()

    def _spill(self) -> None:
        records = list(self._queue)
        runs = sorted({r.run_id for r in records})
        if self.spill_path is None:
            log.error("the database stayed unavailable: the records of runs %s are lost", ", ".join(runs))
            return
        try:
            fd = os.open(self.spill_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as out:
                for record in records:
                    out.write(record.to_json() + "\n")
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            log.error(
                "the database stayed unavailable and %s could not be written (%s): "
                "the records of runs %s are lost",
                self.spill_path,
                exc.strerror or exc,
                ", ".join(runs),
            )
            return
        log.warning(
            "the database stayed unavailable: %d records of runs %s are kept in %s for the next start",
            len(records),
            ", ".join(runs),
            self.spill_path,
        )
        while self._queue:
            self._pop()

    def replay(self) -> int:
        """At start-up (blocking): write the records a previous process left in the file, in
        order, then remove it. A database still unavailable stops start-up with the file
        kept as it was (a replay skips outcomes already written)."""
        if self.spill_path is None or not self.spill_path.exists():
            return 0
        lines = self.spill_path.read_text(encoding="utf-8").splitlines()
        written = 0
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = Record.from_json(line)
            except (ValueError, KeyError, TypeError):
                log.error("%s line %d is not a run record; skipped", self.spill_path, number)
                continue
            try:
                self.apply(record)
            except Exception as exc:
                if is_unavailable(exc):
                    raise
                log.exception(
                    "run %s: its kept %s record cannot be written; dropped", record.run_id, record.kind
                )
                continue
            written += 1
        self.spill_path.unlink()
        if written:
            log.info("wrote %d run records kept by the previous process", written)
        return written


def _may_replace(status: str, error: dict[str, Any] | None) -> bool:
    """Whether an outcome may be written over what the run's row says: not over one
    recorded already (a replay of a record written before its file went; a run deleted
    meanwhile has no row at all), except an `interrupted` one."""
    if status not in run_store.FINAL_STATUSES:
        return True
    return (error or {}).get("code") in REPLACEABLE_CODES


def _describe(exc: BaseException) -> str:
    mapped = unavailable(exc)
    if isinstance(mapped, StoreUnavailable):
        return mapped.code
    return type(exc).__name__
