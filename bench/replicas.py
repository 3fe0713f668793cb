"""Several replicas behind HAProxy: throughput with one replica against two, and the latency of
an answer that crosses replicas against the same answer on one replica.

The deployment is the real one, on loopback only: a throwaway PostgreSQL server (Debian's
binaries), two `steamharness serve` processes with their own data dirs sharing the database,
secret key and shared dir, and Debian's `haproxy` running deploy/haproxy.cfg itself. It is
set up with the test suite's helpers (tests/replicas/conftest.py `PgServer`,
tests/replicas/cluster.py), so the benchmark measures exactly what the tests check.

- `throughput`: two HAProxy instances with the same deploy/haproxy.cfg: one whose two
  `server` lines both point at replica A ("one replica"), one in front of A and B ("two
  replicas"). 16 concurrent clients per instance (Python SDK, `mode="legacy"`, one session
  each: HAProxy spreads the sessions over the replicas, and each sticks), `echo` calls of
  examples/hello; a fixed number of calls per round, 1 warm-up + N measured rounds
  alternating ABBA; median calls/s and the ratio two/one.
- `answer`: a run of tests/fixtures/torture `ask_once` waits for its answer on replica A
  (a call without elicitation leaves it `interaction_required`). The answer is posted through
  the JSON API either on B ("cross": B records it, PostgreSQL NOTIFY wakes A, A's worker
  finishes) or on A ("same"), and the run is read through the same replica's API until
  `success`. Time from the POST to the first read that sees `success`; p50/p99; cross and
  same alternate in blocks (ABBA).

Run: `python bench/replicas.py [--parts throughput,answer] [--rounds N] [--round-calls N]
[--answers N]`
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # the tests' deployment helpers (after bench/ and PYTHONPATH)

import _common  # noqa: E402
import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from tests.e2e.server import HELLO, TORTURE  # noqa: E402
from tests.replicas.cluster import Cluster, HaProxy, running_cluster  # noqa: E402
from tests.replicas.conftest import PgServer  # noqa: E402

CLIENTS = 16
BLOCK = 10  # answers per block (ABBA)
TIMEOUT = 60.0
TEXT = "benchmark payload"


@contextlib.contextmanager
def deployment(root: Path) -> Iterator[tuple[Cluster, HaProxy]]:
    """PostgreSQL, replicas A and B behind HAProxy, and a second HAProxy in front of A only."""
    pg = PgServer(root / "pg")
    (root / "pg").mkdir()
    pg.start()
    try:
        url = pg.url(pg.new_database())
        with running_cluster(root / "cluster", url) as cluster:
            single = HaProxy([cluster.a, cluster.a], log_path=root / "haproxy-single.log")
            single.start()
            try:
                single.wait_until_both_replicas_answer({cluster.id_of(cluster.a)})
                yield cluster, single
            finally:
                single.stop()
    finally:
        pg.stop()


async def _open(stack: AsyncExitStack, url: str, key: str) -> Client:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120))
    )
    client = Client(streamable_http_client(url, http_client=http), mode="legacy")
    return await stack.enter_async_context(client)


async def _echo(client: Client) -> None:
    result = await client.call_tool("echo", {"text": TEXT})
    body = result.structured_content or {}
    assert not result.is_error and body.get("status") == "success", result


async def _round(pool: list[Client], calls: int) -> float:
    """`calls` echo calls spread over the pool's clients; calls/s."""
    per = [calls // len(pool) + (1 if i < calls % len(pool) else 0) for i in range(len(pool))]
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for client, n in zip(pool, per, strict=True):

            async def run(client: Client = client, n: int = n) -> None:
                for _ in range(n):
                    await _echo(client)

            tg.start_soon(run)
    return calls / (time.perf_counter() - start)


async def _rounds(
    targets: dict[str, HaProxy], rates: dict[str, list[float]], key: str, rounds: int, round_calls: int
) -> None:
    async with AsyncExitStack() as stack:
        pools = {
            name: [await _open(stack, lb.mcp_url(HELLO), key) for _ in range(CLIENTS)]
            for name, lb in targets.items()
        }
        for pool in pools.values():
            await _round(pool, round_calls)
        order = list(pools.items())
        for _ in range(rounds):
            for name, pool in order:
                rates[name].append(await _round(pool, round_calls))
            order = order[::-1]


async def part_throughput(cluster: Cluster, single: HaProxy, key: str, rounds: int, round_calls: int) -> None:
    print(
        f"\n[throughput] {CLIENTS} concurrent clients (one session each) per HAProxy, echo, "
        f"{round_calls} calls per round, 1 warm-up + {rounds} measured rounds each, ABBA"
    )
    targets = {"one replica": single, "two replicas": cluster.lb}
    rates: dict[str, list[float]] = {name: [] for name in targets}
    with anyio.fail_after(TIMEOUT * (rounds + 1) * 2):  # a stuck call ends the script, not a hang
        await _rounds(targets, rates, key, rounds, round_calls)
    for name, values in rates.items():
        listed = ", ".join(f"{r:.0f}" for r in values)
        print(f"  {name:<14} {_common.percentile(values, 50):8.1f} calls/s median  [{listed}]")
    one, two = (_common.percentile(rates[n], 50) for n in targets)
    paired = sorted(b / a for a, b in zip(rates["one replica"], rates["two replicas"], strict=True))
    print(f"  two/one        {two / one:.2f}x (medians; per-round pairs {paired[0]:.2f}..{paired[-1]:.2f})")


async def _waiting_run(client: Client) -> tuple[str, str]:
    """(run id, interaction id) of an `ask_once` run left waiting for its answer."""
    with anyio.fail_after(TIMEOUT):
        result = await client.call_tool("ask_once", {})
    body: dict[str, Any] = result.structured_content or {}
    assert body.get("error", {}).get("code") == "interaction_required", body
    return body["runId"], body["error"]["interactionId"]


async def _answer(api: httpx2.AsyncClient, run_id: str, iid: str) -> float:
    """Seconds from the POST of the answer to the first read of the run that says success."""
    start = time.perf_counter()
    r = await api.post(f"/api/interactions/{iid}/answer", json={"action": "accept", "content": {"name": "B"}})
    assert r.status_code == 200, r.text
    with anyio.fail_after(TIMEOUT):
        while True:
            data = (await api.get(f"/api/runs/{run_id}")).json()["data"]
            if data["status"] == "success":
                return time.perf_counter() - start
            assert data["status"] in ("running", "waiting_for_input"), data
            await anyio.sleep(0.001)  # polling the run's record, bounded by fail_after


async def part_answer(cluster: Cluster, key: str, answers: int) -> None:
    print(
        f"\n[answer] ask_once runs waiting on replica A; answer posted on B (cross) or on A (same), "
        f"{answers} each, blocks of {BLOCK}, ABBA"
    )
    auth = {"Authorization": f"Bearer {key}"}
    samples: dict[str, list[float]] = {"same (A)": [], "cross (B)": []}
    async with (
        httpx2.AsyncClient(base_url=cluster.a.base_url, headers=auth, timeout=TIMEOUT) as on_a,
        httpx2.AsyncClient(base_url=cluster.b.base_url, headers=auth, timeout=TIMEOUT) as on_b,
        AsyncExitStack() as stack,
    ):
        caller = await _open(stack, cluster.a.mcp_url(TORTURE), key)
        apis = {"same (A)": on_a, "cross (B)": on_b}
        for api in apis.values():  # warm-up: one of each
            await _answer(api, *await _waiting_run(caller))
        order = list(apis.items())
        done = 0
        while done < answers:
            n = min(BLOCK, answers - done)
            for name, api in order:
                for _ in range(n):  # one waiting run at a time: each holds a worker slot
                    samples[name].append(await _answer(api, *await _waiting_run(caller)))
            order, done = order[::-1], done + n
    for name, values in samples.items():
        p50, p99 = _common.percentile(values, 50), _common.percentile(values, 99)
        print(
            f"  {name:<10} POST → success  p50 {_common.ms(p50)}   p99 {_common.ms(p99)}   (n={len(values)})"
        )
    same, cross = (_common.percentile(v, 50) for v in samples.values())
    same99, cross99 = (_common.percentile(v, 99) for v in samples.values())
    print(
        f"  cross - same   p50 {_common.ms(cross - same)}   ratio p50 {cross / same:.2f}x   "
        f"p99 {cross99 / same99:.2f}x"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="throughput,answer")
    parser.add_argument("--rounds", type=int, default=6, help="measured throughput rounds (2..50)")
    parser.add_argument("--round-calls", type=int, default=320, help="calls per round (32..5000)")
    parser.add_argument("--answers", type=int, default=60, help="answers per side (10..1000)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts <= {"throughput", "answer"}:
        parser.error("--parts: throughput and/or answer")
    if not (2 <= args.rounds <= 50 and 32 <= args.round_calls <= 5000 and 10 <= args.answers <= 1000):
        parser.error("--rounds 2..50, --round-calls 32..5000, --answers 10..1000")
    print("Replicas behind HAProxy (deploy/haproxy.cfg), PostgreSQL, loopback")
    print(_common.machine_line())
    root = Path(tempfile.mkdtemp(prefix="shbench-replicas-"))
    os.chmod(root, 0o755)  # PostgreSQL runs as `postgres` when we are root
    started: _common.ProcMap = {}
    try:
        with deployment(root) as (cluster, single):
            key = cluster.a.create_key("bench")
            if "throughput" in parts:
                await part_throughput(cluster, single, key, args.rounds, args.round_calls)
            if "answer" in parts:
                await part_answer(cluster, key, args.answers)
            started = _common.descendants()
    finally:
        _common.report_leftovers("replicas", _common.stop_pids(started))
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main)
