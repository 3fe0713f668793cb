"""Helpers shared by the benchmark scripts: percentiles, formatting, process bookkeeping, and
logging the benchmarks' admin account in to the web UI.

Process bookkeeping reads /proc (Linux): every descendant of this process is recorded by PID
and start time, so the scripts can stop exactly the processes they started (never by name)
and notice any that outlived their own shutdown.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import platform
import re
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

# pid -> start time in clock ticks since boot (guards against PID reuse).
ProcMap = dict[int, int]

# The admin account the web UI benchmarks create in their fresh store and log in as.
ADMIN = ("bench", "bench-password-1")


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): the smallest sample with at least q% at or below it."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


def ratio(a: float, b: float) -> str:
    """a/b as a factor, with enough digits to stay readable when a is far below b."""
    if b <= 0:
        return "n/a"
    r = a / b
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.4f}x (1/{b / a:.0f})" if a > 0 else "0x"


def machine_line() -> str:
    """One line naming what the figures were measured on."""
    try:
        mcp_version = version("mcp")
    except PackageNotFoundError:
        mcp_version = "?"
    spec = importlib.util.find_spec("webui")
    origin = os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else "?"
    return (
        f"{time.strftime('%Y-%m-%d')}  {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, mcp {mcp_version}, loadavg {os.getloadavg()[0]:.2f}, "
        f"webui from {origin}"
    )


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time) of a live process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            raw = fh.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited already; its parent only has to reap it
        return None
    return int(fields[1]), int(fields[19])


def descendants(root: int | None = None) -> ProcMap:
    """Every live descendant of `root` (default: this process), by PID with its start time."""
    root = os.getpid() if root is None else root
    parents: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            parents[int(entry)] = st
    found: ProcMap = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in parents.items() if ppid in frontier and pid not in found}
        found.update({pid: parents[pid][1] for pid in frontier})
    return found


def alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] == start


def stop_pids(procs: ProcMap, grace: float = 2.0) -> list[int]:
    """SIGTERM then SIGKILL each recorded process that is still alive; returns those it had to stop."""
    survivors = [pid for pid, start in procs.items() if alive(pid, start)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in survivors:
            if alive(pid, procs[pid]):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(alive(p, procs[p]) for p in survivors):
            time.sleep(0.02)
    return survivors


def report_leftovers(label: str, stopped: Iterable[int]) -> None:
    """A process alive after its owner shut down is worth knowing about: say so on stderr."""
    pids = sorted(stopped)
    if pids:
        print(
            f"note: {label}: {len(pids)} process(es) outlived shutdown and were stopped: {pids}",
            file=sys.stderr,
        )


class FormClient(Protocol):
    """What `log_in` needs of an HTTP client on the app (httpx2.Client, Starlette's TestClient)."""

    def get(self, url: str) -> Any: ...

    def post(self, url: str, *, data: dict[str, str], follow_redirects: bool) -> Any: ...


def log_in(client: FormClient) -> None:
    """Log ADMIN in through the login form (its CSRF token included); the client keeps the cookie."""
    form = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token, form.text
    data = {"username": ADMIN[0], "password": ADMIN[1], "csrf_token": token.group(1)}
    r = client.post("/login", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text
