"""`steamharness serve` with `Authenticator.from_header` timed, for the `auth` part of http_call.py.

This runs the real CLI (`webui.cli.main`) in this process after wrapping one method: every
`Authenticator.from_header` call the server makes (one per HTTP request) records its wall time,
the CPU time of the calling thread, and whether a garbage collection ran during the call.
Nothing else is changed; the wrapper costs about a microsecond per request.

On SIGUSR1 the samples taken so far are written as JSON to the `--dump` path (atomically, by
rename) and the record is cleared, so a caller can discard a warm-up and then read what it
measured. The signal is delivered to the main thread, which is the one running the event loop.

Run: `python bench/instrumented_serve.py --dump PATH serve --port N --data-dir DIR`
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from webui.auth import keys
from webui.cli import main

# (wall seconds, thread CPU seconds, a collection ran): one append per call, so a dump that
# interrupts the wrapper never sees half a sample.
samples: list[tuple[float, float, bool]] = []
gc_starts = 0


def _on_gc(phase: str, _info: dict[str, Any]) -> None:
    global gc_starts
    if phase == "start":
        gc_starts += 1


def _install() -> None:
    original = keys.Authenticator.from_header

    def timed(self: keys.Authenticator, header: str | None) -> keys.Principal:
        collections = gc_starts
        c0, w0 = time.thread_time(), time.perf_counter()
        try:
            return original(self, header)
        finally:
            w1, c1 = time.perf_counter(), time.thread_time()
            samples.append((w1 - w0, c1 - c0, gc_starts != collections))

    keys.Authenticator.from_header = timed  # type: ignore[method-assign]
    gc.callbacks.append(_on_gc)


def _dumper(path: Path) -> Any:
    def dump(_signum: int, _frame: FrameType | None) -> None:
        taken = samples[:]
        del samples[: len(taken)]
        data = json.dumps(
            {"wall": [s[0] for s in taken], "cpu": [s[1] for s in taken], "gc": [s[2] for s in taken]}
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)

    return dump


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--dump":
        sys.exit(__doc__)
    dump_path = Path(sys.argv[2])
    _install()
    signal.signal(signal.SIGUSR1, _dumper(dump_path))
    sys.argv = ["steamharness", *sys.argv[3:]]
    main()
