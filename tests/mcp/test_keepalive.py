"""The progress stream of one call (one increasing sequence for workflow reports and
keep-alives) and the keep-alive messages, without a server."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from webui.mcp.keepalive import ProgressStream, describe_wait, keeping_alive
from webui.runs.types import LiveState
from webui.store.models import Interaction
from webui.store.statuses import RunStatus

pytestmark = pytest.mark.anyio

Sent = list[tuple[float, float | None, str | None]]


def recording() -> tuple[ProgressStream, Sent]:
    sent: Sent = []

    async def send(progress: float, total: float | None, message: str | None) -> None:
        sent.append((progress, total, message))

    return ProgressStream(send), sent


async def test_reports_and_keep_alives_share_one_strictly_increasing_sequence() -> None:
    stream, sent = recording()
    await stream.tick("queued")
    await stream.report(3, 10, "copying")
    await stream.tick("running Copy: copying")
    await stream.tick("running Copy: copying")
    await stream.report(2, 10, "went back")  # not past the last value: moved on instead
    await stream.report(5, 10, "halfway")
    assert sent == [
        (0.0, None, "queued"),
        (3, 10, "copying"),
        (3.001, 10, "running Copy: copying"),
        (3.002, 10, "running Copy: copying"),
        (3.003, 10, "went back"),
        (5, 10, "halfway"),
    ]
    assert stream.message == "halfway"


async def test_a_notification_that_cannot_be_sent_does_not_fail_the_call() -> None:
    async def broken(progress: float, total: float | None, message: str | None) -> None:
        raise anyio.BrokenResourceError

    stream = ProgressStream(broken)
    await stream.report(1, None, "one")
    await stream.tick("still here")
    assert stream.last == 1.001


async def test_keep_alives_tick_with_the_described_message_while_the_block_runs() -> None:
    stream, sent = recording()
    three = anyio.Event()

    def describe() -> str:
        if len(sent) >= 2:
            three.set()
        return "running Sleep"

    with anyio.fail_after(30):
        async with keeping_alive(stream, 0.01, describe):
            await three.wait()
    assert len(sent) >= 2
    assert {m for _, _, m in sent} == {"running Sleep"}


async def test_interval_zero_starts_no_keep_alive() -> None:
    stream, sent = recording()
    async with keeping_alive(stream, 0, lambda: "x"):
        for _ in range(10):  # a ticker with interval 0 would tick at each of these checkpoints
            await anyio.lowlevel.checkpoint()
    assert sent == []


def _question() -> Interaction:
    return Interaction(
        id="ia-1", run_id="run-1", kind="form", title="Your name?", requested_schema={}, fields=[]
    )


@pytest.mark.parametrize(
    ("state", "base", "expected"),
    [
        (None, None, None),
        (LiveState(RunStatus.QUEUED, None, ()), None, "queued: Sleep waits for a free worker"),
        (LiveState(RunStatus.RUNNING, None, ()), None, "running Sleep"),
        (
            LiveState(RunStatus.WAITING_FOR_INPUT, _question(), ()),
            None,
            "waiting for input: Your name? — answer it in your MCP client",
        ),
        (
            LiveState(RunStatus.WAITING_FOR_INPUT, _question(), ()),
            "http://127.0.0.1:8000",
            "waiting for input: Your name? — answer it in your MCP client or at "
            "http://127.0.0.1:8000/inbox#interaction-ia-1",
        ),
        (
            LiveState(RunStatus.WAITING_FOR_CHILD, None, ("child-1",)),
            None,
            "waiting for the related run child-1 to finish",
        ),
        # A child's question reaches the parent: the person answers it, wherever it was asked.
        (
            LiveState(RunStatus.WAITING_FOR_CHILD, _question(), ("child-1",)),
            None,
            "waiting for input: Your name? — answer it in your MCP client",
        ),
    ],
)
def test_the_keep_alive_message_says_what_the_run_waits_for_and_where_to_answer(
    state: LiveState | None, base: str | None, expected: str | None
) -> None:
    assert describe_wait(state, title="Sleep", last_message=None, base_url=base) == expected


def test_a_running_step_names_the_workflows_last_progress_message() -> None:
    state = LiveState(RunStatus.RUNNING, None, ())
    message = describe_wait(state, title="Sleep", last_message="worker=12", base_url=None)
    assert message == "running Sleep: worker=12"
