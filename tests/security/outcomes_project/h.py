"""A handler the test releases: it reports that it runs, then waits for its gate file."""

import os
import time

GATE_WAIT_SECONDS = 120  # a bound on the wait, not a measured threshold


def gated(ctx):
    ctx.progress(0, 1, "waiting for the gate")
    deadline = time.monotonic() + GATE_WAIT_SECONDS
    while not os.path.exists(ctx.params["gate"]):
        if time.monotonic() > deadline:
            raise RuntimeError("the test never opened the gate")
        time.sleep(0.02)  # polling a file the test creates, bounded by the deadline
    return {"answer": ctx.params["answer"]}
