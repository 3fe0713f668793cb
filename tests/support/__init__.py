"""What tests share to test behaviour in memory first, and to wait for what they assert.

Pick the cheapest harness that still has what the test is about:

- **The MCP protocol** (tools, schemas, elicitation, 2026 input rounds, logging, progress,
  tasks): `mcp_harness(folder, data_dir)` (`tests.support.memory`) serves one project as
  `steamharness mcp` does — the real MCP server, call bridge, run service and worker pool —
  to the SDK's own `Client` through its in-memory transport::

      async with mcp_harness(EXAMPLES / "interactive", tmp_path / "data") as h:
          async with h.client("legacy", elicitation_callback=answer) as client:  # or "auto": 2026-07-28
              result = await client.call_tool("plan_trip", {"traveller": "Ann"})
          rows = h.services.engine  # the store, the run service: h.services.runs, …

- **The HTTP surface** (the gateway's statuses, sessions, the JSON API, SSE, pages reached
  over HTTP): `in_process_server(tmp_path)` (`tests.support.inprocess`) is a `LiveServer`
  (tests/e2e/server.py) whose server is the real app under uvicorn in a thread of the test
  process: the same data dir, keys, `mcp_url`, store reads; no process start::

      @pytest.fixture(scope="module")
      def server(tmp_path_factory):
          with in_process_server(tmp_path_factory.mktemp("http")) as live:
              yield live

  For a page rendered in this process, tests/web/conftest.py's `web` (TestClient) is cheaper.

- **A process** (signals, exit codes, stdout, logs, `serve`'s start-up, the edge's header and
  body pacing, the TypeScript SDK, conformance, browsers, replicas): `running_server`
  (tests/e2e/server.py) or the stdio command (tests/processes.py). Keep one live pass per
  transport and protocol era; everything else goes in memory.

Waiting: `eventually(check, what)` polls `check()` until it returns something other than
None/False and returns that, bounded by WAIT (`eventually_async` on an event loop; `check`
may be a coroutine function). Never sleep to let things settle.

Timing: a timing constant a test needs shorter is a setting (webui/settings.py), passed to
the harness (`mcp_harness(..., progress_interval_seconds=0.1)`, `in_process_server(tmp_path,
STEAMHARNESS_X_SECONDS="0.1")`) — never monkeypatched."""

from tests.support.inprocess import InProcessServer, in_process_server, make_in_process_server
from tests.support.memory import McpHarness, mcp_harness, settings_for
from tests.support.waiting import eventually, eventually_async

__all__ = [
    "InProcessServer",
    "McpHarness",
    "eventually",
    "eventually_async",
    "in_process_server",
    "make_in_process_server",
    "mcp_harness",
    "settings_for",
]
