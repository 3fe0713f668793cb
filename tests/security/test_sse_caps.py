"""One account cannot hold more live inbox streams than its cap.

Against the real app (in this process) with STEAMHARNESS_MAX_SSE_STREAMS_PER_ACCOUNT=2: ann
opens two streams, the third is refused at once with 429 and a message saying why (a
complete response, no stream held); bo, another account, still opens his; when one of
ann's tabs closes, the server gives its slot back and her next stream opens."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import httpx2
import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_conversation_sse import login, sse_events
from tests.support import in_process_server

pytestmark = pytest.mark.anyio

CAP = 2
WAIT = 60
EVENTS = "/inbox/events"
SSE = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"STEAMHARNESS_MAX_SSE_STREAMS_PER_ACCOUNT": str(CAP)}
    with in_process_server(tmp_path_factory.mktemp("sse-caps"), **env) as live:
        for name in ("ann", "bo"):
            live.add_user(name, password=f"{name}-stream-password")
        yield live


@asynccontextmanager
async def stream(http: httpx2.AsyncClient) -> AsyncIterator[httpx2.Response]:
    """One open conversation stream, past its snapshot."""
    async with http.stream("GET", EVENTS, headers=SSE) as r:
        assert r.status_code == 200, await r.aread()
        events = sse_events(r)  # kept while the tab is open: closing it would end the stream
        first = await anext(events)
        assert first.event == "snapshot"
        yield r


async def attempt(http: httpx2.AsyncClient) -> tuple[int, str, str]:
    """Open a stream: (status, content type, body); an opened one is closed after its snapshot."""
    async with http.stream("GET", EVENTS, headers=SSE) as r:
        kind = r.headers.get("content-type", "")
        if r.status_code == 200:
            first = await anext(sse_events(r))
            return 200, kind, first.event
        return r.status_code, kind, (await r.aread()).decode()


async def test_streams_over_the_cap_are_refused_with_429_per_account_and_a_closed_one_frees_its_slot(
    server: LiveServer,
) -> None:
    timeout = httpx2.Timeout(30, read=WAIT)
    async with (
        httpx2.AsyncClient(base_url=server.base_url, timeout=timeout) as ann,
        httpx2.AsyncClient(base_url=server.base_url, timeout=timeout) as bo,
        AsyncExitStack() as tabs,
    ):
        await login(ann, "ann", "ann-stream-password")
        await login(bo, "bo", "bo-stream-password")
        with anyio.fail_after(WAIT):
            first = await tabs.enter_async_context(stream(ann))
            for _ in range(CAP - 1):
                await tabs.enter_async_context(stream(ann))

            status, kind, text = await attempt(ann)  # read in full: a plain page, no stream behind it
            assert status == 429 and not kind.startswith("text/event-stream")
            assert f"already has {CAP} live inbox streams open (the limit is {CAP})" in text

            async with stream(bo):  # another account is not affected
                pass

            await first.aclose()  # ann closes a tab; the server notices and frees its slot
            while (again := await attempt(ann))[0] == 429:
                await anyio.sleep(0.05)  # bounded by fail_after: waiting for the disconnect
            assert again[0] == 200 and again[1].startswith("text/event-stream") and again[2] == "snapshot"
