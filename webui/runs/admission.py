"""Admission: which live run may hold one of the worker slots, and when.

Only a `running` run holds a slot. A run waiting for a person or for its child runs keeps
its worker process but gives its slot up (so waiting runs never starve running ones, nor a
parent its own children); it takes a slot again, ahead of new runs, before it goes on.
Free slots go first to the account holding the fewest, so one account's burst cannot keep
every other account waiting. A project's queue limit is one rule (`run_limits.queue_full`),
counted here on one process and in the database's admission across replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from sqlalchemy.engine import Engine

from webui.blocking import run_db
from webui.runs.live import LiveRun
from webui.runs.request import RunRequest
from webui.runs.types import SHARED_POLL_SECONDS, RunRefused, RunStatus
from webui.store import run_limits
from webui.store import runs as run_store
from webui.store.models import Run, utcnow


class Admission:
    """The live runs of this process (by id) and their place in line for a slot."""

    def __init__(
        self,
        *,
        engine: Engine,
        max_concurrent_runs: int,
        shared: bool,
        spawn: Callable[[Coroutine[Any, Any, Any]], None],
    ) -> None:
        self.engine = engine
        self._spawn = spawn
        self.max_concurrent_runs = max_concurrent_runs
        # Other replicas share the database: project limits are counted there too.
        self.shared = shared
        self.live: dict[str, LiveRun] = {}
        # Runs being created (preflight passed, insert in flight, not live yet): in line by
        # their `seq`, so that a later start does not go ahead of them; one that took a slot
        # at once (`claim`) counts as holding it, the others as queued.
        self.creating: set[LiveRun] = set()
        self.accepting = True
        self._seq = 0
        self._condition = asyncio.Condition()

    # ----------------------------------------------------------------- counting
    def counts(self, project_id: str | None = None) -> tuple[int, int]:
        """(holding a slot, queued) among live runs, for one project or all."""
        holding = queued = 0
        for live in self._all():
            if project_id is not None and live.request.project.id != project_id:
                continue
            if live.place.held:
                holding += 1
            elif live.status == RunStatus.QUEUED:
                queued += 1
        return holding, queued

    def _all(self) -> Iterable[LiveRun]:
        """The live runs and those being created."""
        return itertools.chain(self.live.values(), self.creating) if self.creating else self.live.values()

    @property
    def claimed(self) -> set[LiveRun]:
        """Runs being created that hold a slot already."""
        return {live for live in self.creating if live.place.held}

    @property
    def starting(self) -> dict[str, int]:
        """Project id -> runs being created that wait for a slot (counted as queued)."""
        counted: dict[str, int] = {}
        for live in self.creating:
            if not live.place.held:
                counted[live.request.project.id] = counted.get(live.request.project.id, 0) + 1
        return counted

    def slot_wanted(self) -> bool:
        return any(live.place.wanted for live in self.live.values())

    def free_slots(self) -> int:
        return self.max_concurrent_runs - self.counts()[0]

    def waiting(self, account_id: int | None = None, *, asking: bool = False) -> int:
        """Runs holding a worker process but no slot (waiting for a person or a child run,
        or for a slot to go on); `asking`: only those of `account_id` with an open question."""
        n = 0
        for live in self.live.values():
            if live.worker is None or live.place.held or live.done.is_set():
                continue
            if asking and (live.request.account_id != account_id or not live.asks.pending):
                continue
            n += 1
        return n

    def waiting_full(self, account_id: int | None, max_waiting_runs: int) -> str | None:
        """Why one more run of `account_id` may not wait now (give its slot up and keep its
        worker process), as the end of a sentence; None when it may. The server's cap, and
        its last `reserved_waiting` places only for an account with no run waiting: no few
        accounts fill them all (one pass over the live runs)."""
        total = held = 0
        for live in self.live.values():
            if live.worker is None or live.place.held or live.done.is_set():
                continue
            total += 1
            held += live.request.account_id == account_id
        if total >= max_waiting_runs:
            return (
                f"the server already has {max_waiting_runs} runs waiting for an answer or a child run"
                " (STEAMHARNESS_MAX_WAITING_RUNS)"
            )
        reserved = reserved_waiting(max_waiting_runs)
        if held and total >= max_waiting_runs - reserved:
            return (
                f"the server's last {reserved} of {max_waiting_runs} places for waiting runs are kept"
                f" for accounts with none waiting, and this account has {held}"
                " (STEAMHARNESS_MAX_WAITING_RUNS)"
            )
        return None

    def waiting_of(self, account_id: int | None) -> int:
        """Runs of `account_id` holding a worker process but no slot, for any reason."""
        return sum(
            1
            for live in self.live.values()
            if live.worker is not None
            and not live.place.held
            and not live.done.is_set()
            and live.request.account_id == account_id
        )

    def slotless(self) -> list[str]:
        """This process's runs past their admission that hold no slot now (the database
        may still say `running`); queued ones are counted as queued."""
        return [
            live.run_id
            for live in self.live.values()
            if not live.place.held and live.status != RunStatus.QUEUED
        ]

    # ----------------------------------------------------------------- admitting
    def preflight(self, request: RunRequest) -> None:
        limits = request.limits
        if not self.accepting:
            raise RunRefused("shutting_down", "The server is shutting down; try again once it is back.")
        if not limits.gate_open:
            raise RunRefused("run_gate_closed", "The project's run gate is closed; no new runs are accepted.")
        if limits.max_queued is not None and not self.shared:  # shared: counted as the run is inserted
            holding, queued = self.counts(request.project.id)
            if run_limits.queue_full(
                holding=holding,
                queued=queued,
                max_running=limits.max_running,
                max_queued=limits.max_queued,
                free_slots=self.free_slots(),
            ):
                raise queue_limit(holding, queued)

    def may_run_now(self, live: LiveRun) -> bool:
        """A slot is free for `live`, and it is next in line for one: runs that already
        have a worker (resuming after an answer or their child runs) first, then the
        account holding the fewest slots, then the oldest. One pass over the live runs
        (as the counting before it): every waiter checks this when a slot frees."""
        held = 0
        by_account: dict[int | None, int] = {}
        by_project: dict[str, int] = {}
        for other in self._all():
            if other.place.held:
                held += 1
                by_account[other.request.account_id] = by_account.get(other.request.account_id, 0) + 1
                by_project[other.request.project.id] = by_project.get(other.request.project.id, 0) + 1
        if held >= self.max_concurrent_runs:
            return False

        def allowed(run: LiveRun) -> bool:
            limit = run.request.limits.max_running
            return limit is None or by_project.get(run.request.project.id, 0) < limit

        def rank(run: LiveRun) -> tuple[bool, int, int]:
            return (run.worker is None, by_account.get(run.request.account_id, 0), run.place.seq)

        def in_line(run: LiveRun) -> bool:
            # Waiting for a slot, or created queued (being created, or live and its driver
            # not waiting yet): not one that never had a slot and gave up waiting.
            return run.place.wanted or (
                run.status == RunStatus.QUEUED and not run.place.held and not run.done.is_set()
            )

        if not allowed(live):
            return False
        mine = rank(live)
        return not any(
            other is not live
            and in_line(other)
            and not other.place.deferred
            and not other.concluded
            and rank(other) < mine
            and allowed(other)
            for other in self._all()
        )

    def claim(self, live: LiveRun) -> bool:
        """A run being created takes a slot at once when one is free and nobody is ahead of
        it in line (one process, not a shared database: there the database admits): it is
        created `running`, in the same transaction. It counts as holding the slot until
        it is no longer `creating` (live, or its creation failed)."""
        self._seq += 1
        live.place.seq = self._seq
        if self.shared:
            return False
        if not self.may_run_now(live):
            return False
        live.place.held = True
        return True

    def line_up(self, live: LiveRun, run: Run) -> None:
        """A run about to be created takes its place in line, in the same step as its
        preflight (no await between them): a free slot is taken at once and the run created
        `running` (its admission in its create transaction; True); else, until it is live,
        it counts as queued. Starts racing each other all see it (the preflight and the
        insert are apart by a thread wait). Then `create`, whatever happens."""
        self.creating.add(live)
        if self.claim(live):
            run.status, run.started_at = RunStatus.RUNNING.value, utcnow()
            live.place.created_running = True

    async def create(
        self,
        live: LiveRun,
        run: Run,
        audit: Callable[[Any], None],
        *,
        replica_slots: tuple[str, int] | None,
    ) -> None:
        """Record the run lined up (with its audit, one transaction) and make it live; across
        replicas, only within the project's limits counted in the database."""
        req = live.request
        created = False
        try:
            if not self.shared:
                await run_db(run_store.create_run, self.engine, run=run, audit=audit)
            else:
                refused = await run_db(
                    run_limits.create_run_within_limits,
                    self.engine,
                    run=run,
                    max_running=req.limits.max_running,
                    max_queued=req.limits.max_queued,
                    free_slots=self.free_slots(),
                    replica_slots=replica_slots,
                    audit=audit,
                )
                if refused is not None:
                    raise queue_limit(*refused)
            self.live[live.run_id] = live
            created = True
        finally:
            self.creating.discard(live)
            if not created:
                # Its claimed slot is free again, or the runs behind it in line go on.
                live.place.held = False
                self._spawn(self.wake())

    async def take_slot(self, live: LiveRun) -> bool:
        """Wait until `live` may hold a slot (this process's worker slots, the project's
        running limit, counted in the database on a shared one) and take it; False when
        the run ends meanwhile."""
        req = live.request
        counted_in_db = self.shared and req.limits.max_running is not None
        resuming = live.worker is not None
        if resuming or not live.place.seq:  # a new run keeps its place from when it was started
            self._seq += 1
            live.place.seq = self._seq
        live.place.wanted = True
        try:
            async with self._condition:
                while True:
                    await self._condition.wait_for(lambda: live.concluded or self.may_run_now(live))
                    if live.concluded:
                        return False
                    if counted_in_db:
                        admitted = await run_db(
                            run_limits.admit_queued,
                            self.engine,
                            run_id=live.run_id,
                            project_id=req.project.id,
                            max_running=req.limits.max_running,
                            exclude=self.slotless(),
                            from_statuses=run_store.RESUMABLE_STATUSES if resuming else ("queued",),
                        )
                        if not admitted:
                            # Taken elsewhere: let the others here go first; a slot freed
                            # here or elsewhere wakes us, the poll covers a missed event.
                            live.place.deferred = True
                            self._condition.notify_all()
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(self._condition.wait(), SHARED_POLL_SECONDS)
                            live.place.deferred = False
                            continue
                    live.place.held = True
                    if self.free_slots() > 0:
                        self._condition.notify_all()  # the next in line may find one free too
                    return True
        finally:
            live.place.wanted = False

    def release(self, live: LiveRun) -> None:
        """`live` stops running for now (it waits for a person or for its child runs): its
        slot goes to the next in line."""
        if live.place.held:
            live.place.held = False
            self._spawn(self.wake())

    def leave(self, live: LiveRun) -> None:
        """`live` has ended: it is no longer live, its slot (if any) goes to the next in line."""
        self.live.pop(live.run_id, None)
        live.place.held = False
        self._spawn(self.wake())

    async def wake(self) -> None:
        """Every run waiting for a slot looks again (one was freed, or one stopped waiting)."""
        async with self._condition:
            self._condition.notify_all()


def reserved_waiting(max_waiting_runs: int) -> int:
    """How many of the server's places for waiting runs are kept for accounts with no run
    waiting (one each): a quarter of them, 8 of the default 32. Filling the server then takes
    many accounts, not the few whose per-account caps add up to it."""
    return max_waiting_runs // 4


def queue_limit(holding: int, queued: int) -> RunRefused:
    return RunRefused(
        "queue_limit",
        f"The project already has {holding} running and {queued} queued runs; try again later.",
    )
