"""A 2025-session client that declares sampling/roots and answers the
server's inline request with something that is not a result of it (a broken or hostile
client). The server's own rule (webui.mcp.questions._deliver_client_request): "A result
that is not one (a broken client): the handler's call raises" -- the run goes on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_client_requests import _call, _row
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR
from tests.support import in_process_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("inline-results")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("inline-results")


async def test_a_sampling_result_that_is_not_one_reaches_the_handler_as_a_refusal(
    server: LiveServer, key: str
) -> None:
    async def broken(ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        # No model, no role: not a CreateMessageResult (built past the client's own checks).
        return types.CreateMessageResult.model_construct(content=types.TextContent(type="text", text="x"))

    result = await _call(server, key, "sample_or_refusal", {}, sampling_callback=broken)
    sc = result.structured_content or {}
    assert result.is_error is not True, (result.content, sc)
    assert "refused" in sc.get("output", {}), sc


async def test_a_roots_result_that_is_not_one_reaches_the_handler_as_a_refusal(
    server: LiveServer, key: str
) -> None:
    async def broken(ctx: ClientRequestContext) -> Any:
        return types.ListRootsResult.model_construct(roots=[{"uri": "http://not-a-file-uri"}])

    result = await _call(server, key, "roots_or_refusal", {}, list_roots_callback=broken)
    sc = result.structured_content or {}
    assert result.is_error is not True, (result.content, sc)
    assert "refused" in sc.get("output", {}), sc
    assert _row(server, sc["runId"])["action"] == "decline"
