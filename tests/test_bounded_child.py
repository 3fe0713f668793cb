"""Work on hostile input in a bounded child (webui.bounded_child): whatever the child does —
allocate without end, loop, write too much, start a process — it is stopped by its bounds and
the parent says why, in bounded time; it sees none of the server's environment and, given a
user, runs as that user without groups.

The children run `pickle:loads` on a payload that evaluates an expression: the worst a
hostile file could make of a parser (running code of its choice) is what these children do."""

from __future__ import annotations

import os
import pickle
import time
import zlib
from pathlib import Path

import anyio
import pytest

from tests.helpers import WAIT
from webui.bounded_child import Bounds, ChildFailed, RunAs, run_child, run_child_blocking

pytestmark = pytest.mark.anyio

TARGET = "pickle:loads"
FOREVER = "sum(iter(int, 1))"  # adds zeros without end
SMALL = 256 * 1024 * 1024


class _Eval:
    def __init__(self, expression: str) -> None:
        self.expression = expression

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (eval, (self.expression,))


def evaluating(expression: str) -> bytes:
    """A payload whose unpickling evaluates `expression` in the child."""
    return pickle.dumps(_Eval(expression))


def marking(folder: Path, then: str, pid: str = "__import__('os').getpid()") -> str:
    """An expression that leaves an empty file named by `pid` (the child's) in `folder` (the
    child may write no bytes to files), then evaluates `then`."""
    return f"(open('{folder}/%d' % {pid}, 'w').close(), {then})"


def gone(pid: int) -> bool:
    """Ended (a zombie nobody reaped yet counts: it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def ends(pid: int) -> bool:
    deadline = time.monotonic() + WAIT
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def wait_for_mark(folder: Path) -> int:
    with anyio.fail_after(WAIT):
        while not any(folder.iterdir()):
            await anyio.sleep(0.02)
    return int(next(folder.iterdir()).name)


def fails(payload: bytes, bounds: Bounds, *, blocking: bool) -> ChildFailed:
    async def run() -> bytes:
        return await run_child(TARGET, payload, bounds)

    with pytest.raises(ChildFailed) as caught:
        if blocking:
            run_child_blocking(TARGET, payload, bounds)
        else:
            anyio.run(run)
    return caught.value


def test_a_child_answers_with_what_its_target_returns() -> None:
    assert run_child_blocking("zlib:decompress", zlib.compress(b"hello"), Bounds(seconds=WAIT)) == b"hello"
    assert run_child_blocking(TARGET, evaluating("b'x' * 10"), Bounds(seconds=WAIT)) == b"x" * 10


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "async"])
def test_a_memory_bomb_is_stopped_by_the_address_space_limit(blocking: bool) -> None:
    bounds = Bounds(seconds=WAIT, address_space_bytes=SMALL)
    assert fails(evaluating("b'x' * (8 * 1024**3)"), bounds, blocking=blocking).reason == "memory"


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "async"])
def test_a_child_that_never_ends_is_killed_with_what_it_started(blocking: bool, tmp_path: Path) -> None:
    """Past its time the child's whole process group is killed: it and a process it started."""
    started = "__import__('subprocess').Popen(['sleep', '600']).pid"
    expression = marking(tmp_path, marking(tmp_path, FOREVER), pid=started)
    failed = fails(evaluating(expression), Bounds(seconds=1), blocking=blocking)
    assert failed.reason == "time"
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2 and all(ends(pid) for pid in pids)


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "async"])
def test_more_output_than_its_bound_or_an_error_is_no_result(blocking: bool) -> None:
    bounds = Bounds(seconds=WAIT, output_bytes=1000)
    assert fails(evaluating("b'x' * 1001"), bounds, blocking=blocking).reason == "output"
    failed = fails(evaluating("1 / 0"), bounds, blocking=blocking)
    assert failed.reason == "error" and "ZeroDivisionError" in failed.detail
    failed = fails(evaluating("'not bytes'"), bounds, blocking=blocking)
    assert failed.reason == "error" and "not bytes" in failed.detail


def test_the_child_sees_none_of_the_servers_environment_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEAMHARNESS_SERVER_ADMIN_KEY", "the-servers-secret-admin-key-0123456789")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    seen = run_child_blocking(
        TARGET,
        evaluating("repr((sorted(__import__('os').environ), __import__('os').getcwd())).encode()"),
        Bounds(seconds=WAIT),
    )
    names, cwd = eval(seen)  # our own repr of a tuple of strings
    assert set(names) <= {"LC_ALL", "LD_LIBRARY_PATH"} and cwd == "/"
    written = evaluating(f"open('{tmp_path}/f', 'wb', buffering=0).write(b'x')")
    failed = fails(written, Bounds(seconds=WAIT), blocking=True)
    assert failed.reason == "error" and "File too large" in failed.detail


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_given_a_user_the_child_runs_as_that_user_without_groups() -> None:
    seen = run_child_blocking(
        TARGET,
        evaluating("repr((__import__('os').getresuid(), __import__('os').getgroups())).encode()"),
        Bounds(seconds=WAIT),
        run_as=RunAs(65534, 65534),
    )
    assert seen == repr(((65534, 65534, 65534), [])).encode()
    # What it imports after the switch still comes from where Python lives.
    answer = run_child_blocking(
        TARGET,
        evaluating("__import__('base64').b64encode(b'ok')"),
        Bounds(seconds=WAIT),
        run_as=RunAs(65534, 65534),
    )
    assert answer == b"b2s="


async def test_the_event_loop_runs_on_while_a_child_works_and_a_cancelled_caller_kills_it(
    tmp_path: Path,
) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    caller = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        with caller:

            async def cancel_once_marked() -> None:
                await wait_for_mark(tmp_path)
                seen = ticks
                with anyio.fail_after(WAIT):
                    while ticks < seen + 3:  # the loop is not blocked by the child
                        await anyio.sleep(0.01)
                caller.cancel()

            tg.start_soon(cancel_once_marked)
            await run_child(TARGET, evaluating(marking(tmp_path, FOREVER)), Bounds(seconds=WAIT))
        tg.cancel_scope.cancel()
    assert caller.cancelled_caught
    assert ends(int(next(tmp_path.iterdir()).name))
