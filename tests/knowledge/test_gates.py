"""What one account may spend on the knowledge base at once: read slots, and the embeddings
endpoint's allowance (requests a minute per account and server-wide, requests in flight)."""

from __future__ import annotations

import anyio
import pytest

from webui.knowledge.gates import EmbeddingsGate, EmbeddingsThrottled, ReadSlots, TooManyReads


def test_an_account_holds_at_most_its_read_slots_and_gets_them_back() -> None:
    slots = ReadSlots(2)
    first, second = slots.take("user:a"), slots.take("user:a")
    other = slots.take("user:b")  # another account is not counted against it
    with pytest.raises(TooManyReads, match=r"already runs 2 .* \(the limit is 2\)") as refused:
        slots.take("user:a")
    assert refused.value.status == 429 and refused.value.retry_after == 1
    first()
    first()  # a release is idempotent
    assert slots.held("user:a") == 1
    with slots.holding("user:a"):
        assert slots.held("user:a") == 2
    second()
    other()
    assert slots.held("user:a") == slots.held("user:b") == 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_accounts_requests_a_minute_are_capped_and_refill() -> None:
    clock = Clock()
    gate = EmbeddingsGate(per_account_per_minute=60, clock=clock)  # one a second
    gate.admit("user:a", 59)
    gate.admit("user:a", 1)
    with pytest.raises(EmbeddingsThrottled, match=r"this account's requests .* \(60 a minute\)") as refused:
        gate.admit("user:a", 1)
    assert refused.value.status == 429 and refused.value.retry_after == 1
    gate.admit("user:b", 1)  # its own allowance
    clock.now += 1.0
    gate.admit("user:a", 1)


def test_a_large_call_is_let_in_and_leaves_the_bucket_in_debt() -> None:
    clock = Clock()
    gate = EmbeddingsGate(per_account_per_minute=60, clock=clock)
    gate.admit("user:a", 200)  # a large document: in while a token is left, paid in full
    with pytest.raises(EmbeddingsThrottled) as refused:
        gate.admit("user:a", 1)
    assert refused.value.retry_after == 141  # until the debt of 140 is paid and one is back
    clock.now += 141
    gate.admit("user:a", 1)


def test_the_servers_requests_a_minute_are_shared_by_every_account() -> None:
    clock = Clock()
    gate = EmbeddingsGate(per_minute=10, per_account_per_minute=100, clock=clock)
    for account in range(10):
        gate.admit(f"user:{account}", 1)
    with pytest.raises(EmbeddingsThrottled, match="the server's requests"):
        gate.admit("user:new", 1)


def test_no_limit_is_no_limit() -> None:
    gate = EmbeddingsGate()
    for _ in range(1000):
        gate.admit("user:a", 64)


def test_the_last_quarter_of_the_servers_requests_is_kept_for_accounts_that_sent_none() -> None:
    clock = Clock()
    gate = EmbeddingsGate(per_minute=8, per_account_per_minute=100, clock=clock)
    gate.admit("user:busy", 6)  # 2 of the server's 8 left: its last quarter
    with pytest.raises(EmbeddingsThrottled, match="the last quarter kept for accounts that sent none"):
        gate.admit("user:busy", 1)
    gate.admit("user:new", 1)  # an account that sent none this minute still gets one
    gate.admit("user:other", 1)
    with pytest.raises(EmbeddingsThrottled, match=r"the server's requests .* \(8 a minute\)"):
        gate.admit("user:last", 1)


def test_the_requests_in_flight_are_capped_and_a_wait_is_bounded() -> None:
    gate = EmbeddingsGate(concurrent=1, wait_seconds=0.2)

    async def main() -> None:
        held = anyio.Event()
        done = anyio.Event()

        async def holder() -> None:
            async with gate.in_flight("user:a"):
                held.set()
                await done.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await held.wait()
            with pytest.raises(EmbeddingsThrottled, match="in flight as it may"):
                async with gate.in_flight("user:b"):
                    pass
            done.set()
        async with gate.in_flight("user:b"):  # given back
            pass

    anyio.run(main)


def test_a_few_accounts_never_hold_every_request_in_flight() -> None:
    """8 in flight: 2 an account, the last 2 for accounts with none (one each)."""
    gate = EmbeddingsGate(concurrent=8, wait_seconds=0.1)

    async def main() -> None:
        done = anyio.Event()
        taken: list[str] = []

        async def hold(account: str, started: anyio.Event) -> None:
            async with gate.in_flight(account):
                taken.append(account)
                started.set()
                await done.wait()

        async def take(tg: anyio.abc.TaskGroup, account: str) -> bool:
            started = anyio.Event()
            tg.start_soon(hold, account, started)
            with anyio.move_on_after(1):
                await started.wait()
            return started.is_set()

        async def refused(account: str) -> None:
            with pytest.raises(EmbeddingsThrottled):
                async with gate.in_flight(account):
                    pass

        async with anyio.create_task_group() as tg:
            for account in ("a", "a", "b", "b", "c", "c"):
                assert await take(tg, account)
            await refused("a")  # its share
            await refused("c")
            assert await take(tg, "d")  # the reserve: one for an account with none
            await refused("d")
            assert await take(tg, "e")
            await refused("f")  # every one of the 8 taken
            done.set()
        assert sorted(taken) == ["a", "a", "b", "b", "c", "c", "d", "e"]

    anyio.run(main)
