"""What the insights page shows for one window and one viewer's projects: per-tool sums and
series from the rollups, the slowest and most failing tools, the questions waiting, the
worker pool over time; and the charts' geometry (numbers only: the template draws the SVG
and escapes every text, tool titles included).

Reads are bounded by the window, never by the number of runs: the hour reads one minute
row per tool per minute, the day 48 half-hour rows per tool, the week 336."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from webui.observability.metrics import Held
from webui.store import insights as store
from webui.store.insights import HALF_HOUR, MINUTE, PoolPoint, QuestionsWaiting, Sums, ToolSums
from webui.store.models import DURATION_BOUNDS_MS


@dataclass(frozen=True)
class Window:
    name: str
    label: str
    period_s: int  # which rollup rows it reads
    step_s: int  # one chart point
    points: int

    @property
    def span_s(self) -> int:
        return self.step_s * self.points


WINDOWS: dict[str, Window] = {
    "hour": Window("hour", "Last hour", MINUTE, 60, 60),
    "day": Window("day", "Last 24 hours", HALF_HOUR, 1800, 48),
    "week": Window("week", "Last 7 days", HALF_HOUR, 4 * 3600, 42),
}
CHARTED_TOOLS = 12  # tools with a chart of their own (the busiest); the table lists all
LISTED_TOOLS = 200
TOP = 5  # slowest / most failing

CHART_WIDTH, CHART_HEIGHT = 600, 120


def duration_text(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms >= DURATION_BOUNDS_MS[-1]:
        return f"> {DURATION_BOUNDS_MS[-1] // 60_000} min"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def age_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86_400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86_400} d {seconds % 86_400 // 3600} h"


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str  # the point's time and value (text: escaped by the template)


@dataclass
class Chart:
    """Bars (e.g. calls) with an overlay (e.g. failures) and a line on its own scale (e.g.
    p95); coordinates in a CHART_WIDTH x CHART_HEIGHT view box."""

    label: str
    bars: list[Bar] = field(default_factory=list)
    overlay: list[Bar] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # polyline point lists ("x,y x,y ...")
    top_label: str = ""  # the bars' scale
    line_label: str = ""  # the line's scale
    overlay_name: str = "failed"
    line_name: str = "p95"
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT


def _time_text(start_s: int, window: Window) -> str:
    at = datetime.fromtimestamp(start_s, UTC)
    return at.strftime("%H:%M") if window.name != "week" else at.strftime("%a %H:%M")


def chart(
    label: str,
    starts: Sequence[int],
    window: Window,
    bars: Sequence[float],
    *,
    overlay: Sequence[float] | None = None,
    line: Sequence[float | None] | None = None,
    names: tuple[str, str] = ("calls", "failed"),
    line_name: str = "p95",
    line_is_duration: bool = True,
) -> Chart:
    """A chart of one value per point (`starts`); `overlay` on the same scale as `bars`."""
    n = max(1, len(starts))
    slot = CHART_WIDTH / n
    top = max([1.0, *bars, *(overlay or ())])
    result = Chart(label=label, top_label=f"{top:g} {names[0]}", overlay_name=names[1], line_name=line_name)

    def bar(i: int, value: float, what: str) -> Bar:
        height = CHART_HEIGHT * value / top
        return Bar(
            x=round(i * slot + slot * 0.1, 2),
            y=round(CHART_HEIGHT - height, 2),
            width=round(slot * 0.8, 2),
            height=round(height, 2),
            title=f"{_time_text(starts[i], window)}: {value:g} {what}",
        )

    result.bars = [bar(i, v, names[0]) for i, v in enumerate(bars) if v > 0]
    if overlay is not None:
        result.overlay = [bar(i, v, names[1]) for i, v in enumerate(overlay) if v > 0]
    if line is not None:
        values = [v for v in line if v is not None]
        line_top = max([1.0, *values])
        result.line_label = duration_text(line_top) if line_is_duration else f"{line_top:g}"
        segment: list[str] = []
        for i, v in enumerate(line):
            if v is None:
                if segment:
                    result.lines.append(" ".join(segment))
                segment = []
                continue
            x = round(i * slot + slot / 2, 2)
            y = round(CHART_HEIGHT - CHART_HEIGHT * v / line_top, 2)
            segment.append(f"{x},{y}")
        if segment:
            result.lines.append(" ".join(segment if len(segment) > 1 else [*segment, segment[0]]))
    return result


@dataclass
class ToolRow:
    project_id: str
    project_name: str
    entrypoint_id: str
    title: str
    calls: int
    failures: int
    p50_ms: float | None
    p95_ms: float | None
    mean_ms: float | None
    chart: Chart | None = None

    @property
    def failure_rate(self) -> float:
        return self.failures / self.calls if self.calls else 0.0

    @property
    def p50(self) -> str:
        return duration_text(self.p50_ms)

    @property
    def p95(self) -> str:
        return duration_text(self.p95_ms)


@dataclass(frozen=True)
class WaitingRow:
    run_id: str
    project_name: str
    tool: str
    title: str
    kind: str
    waiting: str


@dataclass(frozen=True)
class PoolRow:
    at: str
    slots: int
    busy: int
    queued: int
    waiting: int


@dataclass
class Insights:
    window: Window
    generated_at: datetime
    calls: int
    failures: int
    p50: str
    p95: str
    tools: list[ToolRow]
    more_tools: int  # tools not listed (beyond LISTED_TOOLS)
    slowest: list[ToolRow]
    failing: list[ToolRow]
    overall: Chart
    overall_rows: list[tuple[str, int, int, str]]  # time, calls, failures, p95
    questions: int
    waiting: list[WaitingRow]  # the oldest the viewer may read: her runs' (administrators: all)
    listable: int  # the questions the viewer may read; the others are counted only
    oldest_wait: str
    pool: Chart | None = None  # administrators only
    pool_rows: list[PoolRow] = field(default_factory=list)
    pool_now: Held | None = None


def window_since(window: Window, now_s: int) -> int:
    """Where a window's totals start: its whole span back from now (to a rollup period), so
    the oldest point's earlier part, which the charts start after, is counted too."""
    since = now_s - window.span_s
    return since - since % window.period_s


def point_starts(window: Window, now_s: int) -> list[int]:
    last = now_s - now_s % window.step_s
    return [last - (window.points - 1 - i) * window.step_s for i in range(window.points)]


def build(
    engine: Engine,
    window: Window,
    *,
    project_ids: Collection[str] | None,
    project_names: Mapping[str, str],
    questions_of: int | None,
    pool_now: Held | None = None,
    now_s: int | None = None,
) -> Insights:
    """The page's model. `project_ids` None: every project (administrators, who also get the
    worker pool: `pool_now` is this replica's, and the pool over time is every replica's).
    `questions_of`: the account whose runs' waiting questions are listed (titles, tools,
    runs); None lists every run's (administrators). Other accounts' questions in a shared
    project are counted, never listed."""
    now_s = int(time.time()) if now_s is None else now_s
    starts = point_starts(window, now_s)
    since = window_since(window, now_s)
    tools = store.read_tools(
        engine, period_s=window.period_s, since_s=since, step_s=window.step_s, project_ids=project_ids
    )
    waiting = store.read_waiting(engine, project_ids=project_ids, shown_to=questions_of)
    total = Sums()
    per_point = {start: Sums() for start in starts}
    rows: list[ToolRow] = []
    for tool in tools:
        total.add(tool.total.calls, tool.total.failures, tool.total.duration_ms, tool.total.buckets)
        for start, sums in tool.points.items():
            if start in per_point:
                per_point[start].add(sums.calls, sums.failures, sums.duration_ms, sums.buckets)
        rows.append(_tool_row(tool, project_names))
    rows.sort(key=lambda r: (-r.calls, r.project_name, r.title, r.entrypoint_id))
    for row, tool in zip(rows[:CHARTED_TOOLS], _in_order(tools, rows[:CHARTED_TOOLS]), strict=True):
        row.chart = _tool_chart(row, tool, starts, window)
    slowest = sorted((r for r in rows if r.p95_ms is not None), key=lambda r: -(r.p95_ms or 0))[:TOP]
    failing = sorted((r for r in rows if r.failures), key=lambda r: (-r.failures, -r.failure_rate))[:TOP]
    points = [per_point[s] for s in starts]
    overall = chart(
        "Calls and failures, all tools",
        starts,
        window,
        [p.calls for p in points],
        overlay=[p.failures for p in points],
        line=[p.quantile_ms(0.95) for p in points],
    )
    insights = Insights(
        window=window,
        generated_at=datetime.fromtimestamp(now_s, UTC),
        calls=total.calls,
        failures=total.failures,
        p50=duration_text(total.quantile_ms(0.5)),
        p95=duration_text(total.quantile_ms(0.95)),
        tools=rows[:LISTED_TOOLS],
        more_tools=max(0, len(rows) - LISTED_TOOLS),
        slowest=slowest,
        failing=failing,
        overall=overall,
        overall_rows=[
            (_time_text(s, window), p.calls, p.failures, duration_text(p.quantile_ms(0.95)))
            for s, p in zip(starts, points, strict=True)
            if p.calls
        ],
        questions=waiting.count,
        waiting=_waiting_rows(waiting, project_names, now_s),
        listable=waiting.listable,
        oldest_wait=age_text(now_s - waiting.oldest_at.timestamp()) if waiting.oldest_at else "—",
    )
    if project_ids is None:
        _add_pool(insights, engine, window, starts, pool_now)
    return insights


def _in_order(tools: Sequence[ToolSums], rows: Sequence[ToolRow]) -> list[ToolSums]:
    by_key = {(t.project_id, t.entrypoint_id): t for t in tools}
    return [by_key[(r.project_id, r.entrypoint_id)] for r in rows]


def _tool_row(tool: ToolSums, project_names: Mapping[str, str]) -> ToolRow:
    t = tool.total
    return ToolRow(
        project_id=tool.project_id,
        project_name=project_names.get(tool.project_id, tool.project_id),
        entrypoint_id=tool.entrypoint_id,
        title=tool.title,
        calls=t.calls,
        failures=t.failures,
        p50_ms=t.quantile_ms(0.5),
        p95_ms=t.quantile_ms(0.95),
        mean_ms=t.duration_ms / t.calls if t.calls else None,
    )


def _tool_chart(row: ToolRow, tool: ToolSums, starts: Sequence[int], window: Window) -> Chart:
    points = [tool.points.get(s) or Sums() for s in starts]
    return chart(
        f"{row.title} ({row.project_name}): calls, failures and p95 duration",
        starts,
        window,
        [p.calls for p in points],
        overlay=[p.failures for p in points],
        line=[p.quantile_ms(0.95) for p in points],
    )


def _waiting_rows(
    waiting: QuestionsWaiting, project_names: Mapping[str, str], now_s: int
) -> list[WaitingRow]:
    return [
        WaitingRow(
            run_id=w.run_id,
            project_name=project_names.get(w.project_id, w.project_id),
            tool=w.tool,
            title=w.title,
            kind=w.kind,
            waiting=age_text(now_s - w.asked_at.timestamp()),
        )
        for w in waiting.oldest
    ]


def _add_pool(
    insights: Insights, engine: Engine, window: Window, starts: Sequence[int], now: Held | None
) -> None:
    samples: dict[int, PoolPoint] = {
        p.start_s: p for p in store.read_pool(engine, since_s=starts[0], step_s=window.step_s)
    }
    points = [samples.get(s) for s in starts]
    insights.pool = chart(
        "Worker slots busy and runs queued",
        starts,
        window,
        [p.busy if p else 0 for p in points],
        overlay=[p.queued if p else 0 for p in points],
        line=[float(p.slots) if p else None for p in points],
        names=("busy", "queued"),
        line_name="slots",
        line_is_duration=False,
    )
    insights.pool_rows = [
        PoolRow(_time_text(s, window), p.slots, p.busy, p.queued, p.waiting)
        for s, p in zip(starts, points, strict=True)
        if p is not None
    ]
    insights.pool_now = now
