"""A run's chatty timeline entries, written in batches.

A handler that logs line after line would otherwise cost a transaction per line. Its
entries of the chatty kinds (stdout, stderr, `ctx.log` lines, progress) wait in a batch of
their run, each stamped with the time it came in, and the batch is written in one
transaction when it holds `BatchLimits.lines` entries (or `MAX_BATCH_BYTES` of text), about
`BatchLimits.seconds` after its first entry, and before any other record of the run goes: a
status change, another kind of timeline entry, one of its store writes, its outcome
(webui.runs.outcomes, the one writer of a run's records, flushes the batch first). So the
timeline keeps its order, and nothing waits past the run's end whatever ends it (a worker
that crashed or was killed, a cancel, a time limit, the server's shutdown): the run's
outcome is always recorded, and its batch goes before it.

A batch is written under a lock of its own: a record that must follow it waits until it is
written, a timer's flush included. The writer keeps a batch the database cannot take
(locked, full) entry by entry, in order, like any record: nothing is dropped for it.
Watchers never wait for a batch: the worker loop hands them the lines from memory first
(webui.runs.worker_loop)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from webui.store.models import utcnow

log = logging.getLogger(__name__)

# The timeline entries that come in streams (a worker's output, its `ctx.log` lines and
# progress reports); other entries are rare and are written at once.
BATCHED_KINDS = frozenset({"stdout", "stderr", "log", "progress"})
# A batch is written once its entries' text reaches this many characters, whatever their
# number: memory per run stays bounded (the worker loop waits for that write).
MAX_BATCH_BYTES = 1024 * 1024
# What an entry costs in a batch beyond its text (its kind, level, progress figures).
ENTRY_OVERHEAD = 64
# At shutdown, how long the flushes under way may take before the batches left are written.
CLOSE_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class BatchLimits:
    """When a run's batch of timeline entries is written: once it holds `lines` entries, or
    `seconds` after its first one (settings `timeline_batch_lines`, `timeline_batch_seconds`).
    `lines` 1 writes every entry at once."""

    lines: int = 100
    seconds: float = 0.1


class Entry(Protocol):
    """A timeline entry as the run's records carry it (webui.runs.outcomes.Record)."""

    run_id: str
    fields: dict[str, Any]


@dataclass
class _Batch:
    entries: list[Entry] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None
    # Held while the batch is written: what must follow it waits.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Timeline:
    """The runs' batches of timeline entries; `write` writes (or keeps) one run's entries,
    in order, in one transaction."""

    def __init__(
        self, write: Callable[[list[Entry]], Awaitable[None]], limits: BatchLimits | None = None
    ) -> None:
        self._write = write
        self.limits = limits or BatchLimits()
        self._batches: dict[str, _Batch] = {}
        self._flushes: set[asyncio.Task[None]] = set()

    def batched(self, entry: Entry) -> bool:
        """Whether the entry waits in its run's batch rather than being written at once."""
        return self.limits.lines > 1 and entry.fields.get("kind") in BATCHED_KINDS

    async def add(self, entry: Entry) -> None:
        """The entry joins its run's batch (`batched(entry)` holds); a full batch is written
        before this returns."""
        batch = self._batches.get(entry.run_id)
        if batch is None:
            batch = self._batches[entry.run_id] = _Batch()
        entry.fields.setdefault("created_at", utcnow())
        batch.entries.append(entry)
        batch.size += len(entry.fields.get("text") or "") + ENTRY_OVERHEAD
        if len(batch.entries) >= self.limits.lines or batch.size >= MAX_BATCH_BYTES:
            await self.flush(entry.run_id)
        elif batch.timer is None:
            loop = asyncio.get_running_loop()
            batch.timer = loop.call_later(self.limits.seconds, self._due, entry.run_id)

    async def flush(self, run_id: str) -> None:
        """Write the run's batch now: when this returns, every entry added before the call is
        written (or kept by the writer). Entries the database refuses for good (not merely
        locked or full) are logged and dropped, as the writer drops such records."""
        batch = self._batches.get(run_id)
        if batch is None:
            return
        async with batch.lock:
            while batch.entries:  # entries added while a write was under way go too
                entries, batch.entries, batch.size = batch.entries, [], 0
                if batch.timer is not None:
                    batch.timer.cancel()
                    batch.timer = None
                try:
                    await self._write(entries)
                except Exception:
                    log.exception(
                        "run %s: %d timeline entries cannot be written; dropped", run_id, len(entries)
                    )
            if self._batches.get(run_id) is batch:
                del self._batches[run_id]

    def _due(self, run_id: str) -> None:
        batch = self._batches.get(run_id)
        if batch is not None:
            batch.timer = None
            task = asyncio.get_running_loop().create_task(self.flush(run_id), name=f"timeline-{run_id}")
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def close(self) -> None:
        """At shutdown: the flushes under way end, then every batch left is written."""
        if self._flushes:
            await asyncio.wait(list(self._flushes), timeout=CLOSE_WAIT_SECONDS)
        for run_id in list(self._batches):
            await self.flush(run_id)
        for task in list(self._flushes):
            task.cancel()
