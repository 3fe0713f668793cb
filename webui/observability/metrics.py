"""Prometheus metrics of one server process (one replica): what it served, how long it
took, what failed, and what it holds now.

Counters and histograms live in one registry per process (`METRICS`) and are moved where
things happen; what the process holds now (queue, worker slots, questions, tasks,
sessions) is read at scrape time from the sources the app registers (`GaugeSource`), so
the call path pays nothing for them. Every label is bounded: methods and tools only by the
names the server knows (anything else is `_other`), and tools only as a published version
names them (a draft's are all `_draft`: its author renames them at will, and each name
would be a series for the process's lifetime), projects by the ones it serves, statuses,
reasons and error types by the server's own sets.

Workflow handlers never report here: they run in worker processes that talk to the server
only through their run's channel, so one process registry is the whole replica.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

OTHER = "_other"
DRAFT = "_draft"
# The OpenTelemetry MCP conventions' buckets, then minutes and an hour (a call may wait
# for a person).
OPERATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400)


@dataclass
class Held:
    """What one app holds now, for the gauges (read at scrape time)."""

    queued: int = 0
    slots_busy: int = 0
    slots_total: int = 0
    waiting_for_input: int = 0
    waiting_for_child: int = 0
    questions: int = 0
    oldest_question_seconds: float = 0.0
    tasks: int = 0
    sessions: dict[str, int] = field(default_factory=dict)  # by protocol version


GaugeSource = Callable[[], Held]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.operation_duration = Histogram(
            "mcp_server_operation_duration_seconds",
            "MCP requests handled, by method, tool and error type (OpenTelemetry MCP semantic"
            " conventions); a tool call lasts until its result or task is sent.",
            ["mcp_method_name", "gen_ai_tool_name", "error_type"],
            buckets=OPERATION_BUCKETS,
            registry=r,
        )
        self.runs_started = Counter(
            "steamharness_runs_started", "Runs started, by project.", ["project"], registry=r
        )
        self.runs_ended = Counter(
            "steamharness_runs_ended",
            "Runs ended, by project and final status.",
            ["project", "status"],
            registry=r,
        )
        self.run_duration = Histogram(
            "steamharness_run_duration_seconds",
            "From a run's start to its end (waits included), by project, tool and final status.",
            ["project", "tool", "status"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.questions_asked = Counter(
            "steamharness_questions_asked",
            "Questions runs asked (forms, approvals, sampling and roots requests), by kind.",
            ["kind"],
            registry=r,
        )
        self.questions_answered = Counter(
            "steamharness_questions_answered",
            "Questions answered, by kind, how (accept, decline, cancel) and channel.",
            ["kind", "action", "channel"],
            registry=r,
        )
        self.question_wait = Histogram(
            "steamharness_question_wait_seconds",
            "From a question to its answer, by kind.",
            ["kind"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.auth_failures = Counter(
            "steamharness_auth_failures",
            "Credentials refused: a Bearer key (bearer) or a login (login).",
            ["kind"],
            registry=r,
        )
        self.throttled = Counter(
            "steamharness_throttled",
            "Requests refused with 429 because their address or account failed too often.",
            ["kind"],
            registry=r,
        )
        self.hub_lagged = Counter(
            "steamharness_event_hub_lagged_subscribers",
            "Event-hub subscribers ended because they fell behind (their events dropped).",
            registry=r,
        )
        self.db_busy = Counter(
            "steamharness_database_busy",
            "Database writes refused as busy or full: a request answered 503 (request) or a run"
            " record kept in memory to be retried (run_record).",
            ["kind"],
            registry=r,
        )
        self._sources: list[GaugeSource] = []
        self._lock = threading.Lock()
        r.register(_HeldCollector(self))

    # ------------------------------------------------------------- gauges
    def add_source(self, source: GaugeSource) -> Callable[[], None]:
        """Register what an app holds; the returned function removes it (at shutdown)."""
        with self._lock:
            self._sources.append(source)

        def remove() -> None:
            with self._lock:
                if source in self._sources:
                    self._sources.remove(source)

        return remove

    @contextlib.asynccontextmanager
    async def holding(self, source: GaugeSource) -> AsyncIterator[None]:
        """`source` registered for as long as the block runs (an app's lifespan)."""
        remove = self.add_source(source)
        try:
            yield
        finally:
            remove()

    def held(self) -> Held:
        with self._lock:
            sources = list(self._sources)
        total = Held()
        for source in sources:
            one = source()
            total.queued += one.queued
            total.slots_busy += one.slots_busy
            total.slots_total += one.slots_total
            total.waiting_for_input += one.waiting_for_input
            total.waiting_for_child += one.waiting_for_child
            total.questions += one.questions
            total.oldest_question_seconds = max(total.oldest_question_seconds, one.oldest_question_seconds)
            total.tasks += one.tasks
            for era, count in one.sessions.items():
                total.sessions[era] = total.sessions.get(era, 0) + count
        return total

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------- events
    def operation(self, method: str, tool: str, error_type: str, seconds: float) -> None:
        self.operation_duration.labels(method, tool, error_type).observe(seconds)

    def run_ended(self, project: str, tool: str, status: str, seconds: float, *, draft: bool) -> None:
        self.runs_ended.labels(project, status).inc()
        self.run_duration.labels(project, tool_label(tool, draft=draft), status).observe(seconds)


class _HeldCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self._families(Held()))

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return list(self._families(self.metrics.held()))

    @staticmethod
    def _families(held: Held) -> Iterator[GaugeMetricFamily]:
        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=value)

        yield gauge("steamharness_runs_queued", "Runs waiting for a worker slot.", held.queued)
        slots = GaugeMetricFamily(
            "steamharness_worker_slots",
            "Worker slots: running runs (busy) and free ones (idle).",
            labels=["state"],
        )
        slots.add_metric(["busy"], held.slots_busy)
        slots.add_metric(["idle"], max(held.slots_total - held.slots_busy, 0))
        yield slots
        waiting = GaugeMetricFamily(
            "steamharness_runs_waiting",
            "Runs waiting for an answer (input) or a child run (child).",
            labels=["for"],
        )
        waiting.add_metric(["input"], held.waiting_for_input)
        waiting.add_metric(["child"], held.waiting_for_child)
        yield waiting
        yield gauge(
            "steamharness_questions_pending", "Questions of live runs not answered yet.", held.questions
        )
        yield gauge(
            "steamharness_questions_oldest_age_seconds",
            "How long the oldest unanswered question has waited (0 when none).",
            held.oldest_question_seconds,
        )
        yield gauge(
            "steamharness_tasks_active", "Runs followed as MCP tasks that have not ended.", held.tasks
        )
        sessions = GaugeMetricFamily(
            "steamharness_mcp_sessions",
            "Open MCP sessions, by protocol version.",
            labels=["mcp_protocol_version"],
        )
        for era, count in sorted(held.sessions.items()):
            sessions.add_metric([era], count)
        yield sessions


# The JSON-RPC and MCP error codes the server answers with; any other (a client's, say) is
# `_other`, so the label stays bounded.
KNOWN_ERROR_CODES = frozenset(
    {-32700, -32600, -32601, -32602, -32603, -32000, -32001, -32002, -32020, -32021, -32042}
)


def tool_label(tool: str | None, *, draft: bool) -> str:
    """The `tool` label of a known tool (None: a name its project does not have, `_other`);
    every tool of a draft is `_draft`."""
    if tool is None:
        return OTHER
    return DRAFT if draft else tool


def error_code_label(code: int) -> str:
    return str(code) if code in KNOWN_ERROR_CODES else OTHER


METRICS = Metrics()
