"""Small shared helpers for tests: process checks and bounded waits."""

from __future__ import annotations

import anyio


def process_gone(pid: int) -> bool:
    """True once `pid` no longer runs (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def wait_until_gone(pids: list[int], timeout: float = 10.0) -> None:
    """Bounded wait on a condition the kernel changes asynchronously."""
    with anyio.fail_after(timeout):
        while not all(process_gone(p) for p in pids):
            await anyio.sleep(0.02)
