"""What `steamharness mcp` serves, driven by the Python SDK client in both protocol eras:
`mode="legacy"` (2025-11-25 session, inline elicitation) and the default mode, which
negotiates 2026-07-28 (InputRequiredResult rounds).

The protocol's behaviour runs in memory (`in_memory`: the same MCP server, call bridge, run
service and real worker processes, tests/support/memory.py); the real process (`connect`)
keeps the live pass of each era, what stdout carries, the worker environment it passes on
and its command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError

from tests import prepared, processes
from tests.conftest import EXAMPLES, TORTURE
from tests.helpers import WAIT, wait_until_gone
from tests.support.memory import mcp_harness

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]
CALL_TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
STEAMHARNESS = processes.STEAMHARNESS

ElicitCallback = Callable[[ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


def server_params(
    project: Path, data_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> StdioServerParameters:
    command, args = processes.stdio_command(["mcp", str(project), "--data-dir", str(data_dir), *extra])
    return StdioServerParameters(command=command, args=args, env=env)


@asynccontextmanager
async def connect(
    project: Path,
    data_dir: Path,
    mode: str,
    *extra: str,
    elicit: ElicitCallback | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    kwargs: dict[str, Any] = {"mode": mode}
    if elicit is not None:
        kwargs["elicitation_callback"] = elicit
    with anyio.fail_after(CALL_TIMEOUT):
        async with Client(server_params(project, data_dir, *extra, env=env), **kwargs) as client:
            yield client


@asynccontextmanager
async def in_memory(
    project: Path,
    data_dir: Path,
    mode: str,
    *,
    elicit: ElicitCallback | None = None,
    **settings: Any,
) -> AsyncIterator[Client]:
    """`connect`'s twin in memory: what `steamharness mcp PROJECT --data-dir DATA_DIR` serves,
    reached by the same client; `settings`: what the command's options would set."""
    kwargs: dict[str, Any] = {"mode": mode}
    if elicit is not None:
        kwargs["elicitation_callback"] = elicit
    async with mcp_harness(project, data_dir, **settings) as harness, harness.client(**kwargs) as client:
        yield client


def scripted(
    *answers: types.ElicitResult, seen: list[types.ElicitRequestParams] | None = None
) -> ElicitCallback:
    queue = list(answers)

    async def callback(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        if seen is not None:
            seen.append(params)
        return queue.pop(0) if queue else types.ElicitResult(action="cancel")

    return callback


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """The result object, checked to be identical in text content and structuredContent."""
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    text = json.loads(result.content[0].text)
    assert text == result.structured_content
    return text


TRIP = (
    types.ElicitResult(action="accept", content={"destination": "Oslo", "nights": 2}),
    types.ElicitResult(action="accept", content={"room": "single", "extras": ["parking"]}),
    types.ElicitResult(action="accept", content={}),
)


@pytest.mark.parametrize("mode", MODES)
async def test_the_catalog_names_the_server_after_the_project_and_lists_strict_schemas(
    tmp_path: Path, mode: str
) -> None:
    async with in_memory(EXAMPLES / "interactive", tmp_path, mode) as client:
        info = client.session.server_info
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert info is not None
    assert info.name == "workflow-7c9e6679-7425-40de-944b-e07fc1f90ae7"
    assert info.version == "2.1.0"
    assert set(tools) == {"plan_trip", "collect_document"}
    plan = tools["plan_trip"]
    assert plan.title == "Plan a trip"
    assert plan.description == "Ask where and how long, then the room, then approval to book."
    assert plan.input_schema == {
        "type": "object",
        "properties": {"traveller": {"type": "string", "description": "Who travels"}},
        "required": ["traveller"],
        "additionalProperties": False,
    }
    assert tools["collect_document"].input_schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert all(t.description for t in tools.values())


@pytest.mark.dialects  # the end-to-end pass of stdio in both eras on PostgreSQL too
@pytest.mark.parametrize("mode", MODES)
async def test_two_questions_and_an_approval_are_answered_on_one_run(
    tmp_path: Path, mode: str, database_url: str
) -> None:
    seen: list[types.ElicitRequestParams] = []
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    store = ("--database-url", database_url)
    async with connect(
        EXAMPLES / "interactive", tmp_path, mode, *store, elicit=scripted(*TRIP, seen=seen)
    ) as client:
        result = await client.call_tool("plan_trip", {"traveller": "Ann"}, progress_callback=on_progress)
    body = payload(result)
    assert result.is_error is False
    assert body["status"] == "success"
    assert body["entrypointId"] == "plan_trip" and body["entrypointTitle"] == "Plan a trip"
    assert body["output"] == {
        "traveller": "Ann",
        "destination": "Oslo",
        "nights": 2,
        "room": "single",
        "extras": ["parking"],
        "booked": True,
    }
    assert [p.message.splitlines()[0] for p in seen] == [
        "Where to?",
        "Which room?",
        "Approve: book 2 nights in Oslo",
    ]
    assert isinstance(seen[0], types.ElicitRequestFormParams)
    assert seen[0].requested_schema["required"] == ["destination", "nights"]
    if mode == "legacy":  # 2026-07-28 delivers progress only to the round that is running
        assert heard and heard[-1] == (3.0, 3.0, "done")


@pytest.mark.parametrize("mode", MODES)
async def test_every_example_returns_its_result_object(tmp_path: Path, mode: str, database_url: str) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("one\ntwo\nthree\n", encoding="utf-8")
    async with in_memory(EXAMPLES / "hello", tmp_path / "d", mode, database_url=database_url) as client:
        hello = payload(await client.call_tool("greet", {"name": "Bo", "shout": True}))
    assert hello["output"] == {"greeting": "HELLO, BO!"}
    assert set(hello) == {"runId", "status", "entrypointId", "entrypointTitle", "output"}
    async with in_memory(EXAMPLES / "files", tmp_path / "d", mode, database_url=database_url) as client:
        files = payload(
            await client.call_tool("summarize", {"document": str(doc), "attachments": [str(doc)]})
        )
    assert files["output"]["lines"] == 3 and files["output"]["name"] == "notes.md"
    assert files["output"]["attachments"] == 1
    assert files["output"]["summaryFile"]["name"] == "summary.txt"
    async with in_memory(EXAMPLES / "ledger", tmp_path / "d", mode, database_url=database_url) as client:
        await client.call_tool("close_period", {})
        failed = await client.call_tool("post_entry", {"amount": 10})
    body = payload(failed)
    assert failed.is_error is True
    assert body["status"] == "failed"
    assert body["error"] == {"code": "business_error", "errCode": 7, "message": "ledger is locked"}
    assert body["runId"] and "output" not in body


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_elicitation_gets_interaction_required_with_the_run(
    tmp_path: Path, mode: str
) -> None:
    async with in_memory(EXAMPLES / "interactive", tmp_path, mode) as client:
        result = await client.call_tool("plan_trip", {"traveller": "Ann"})
    body = payload(result)
    assert result.is_error is True
    assert body["status"] == "waiting_for_input"
    assert body["runId"]
    error = body["error"]
    assert error["code"] == "interaction_required"
    assert error["interactionId"].startswith("int_")
    assert error["fields"] == [
        {"name": "destination", "type": "string", "required": True, "title": "destination"},
        {"name": "nights", "type": "number", "required": True, "title": "nights"},
        {"name": "start", "type": "string", "required": False, "title": "start"},
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["ask_file", "ask_array"])
async def test_a_form_that_mcp_cannot_carry_gets_interaction_required_even_with_elicitation(
    tmp_path: Path, mode: str, tool: str
) -> None:
    seen: list[types.ElicitRequestParams] = []
    async with in_memory(TORTURE, tmp_path, mode, elicit=scripted(seen=seen)) as client:
        body = payload(await client.call_tool(tool, {}))
    assert body["error"]["code"] == "interaction_required"
    assert seen == []  # never auto-answered, never sent as a broken form


@pytest.mark.parametrize("mode", MODES)
async def test_declining_and_cancelling_reach_the_handler(tmp_path: Path, mode: str) -> None:
    decline = types.ElicitResult(action="decline")
    cancel = types.ElicitResult(action="cancel")
    async with in_memory(TORTURE, tmp_path, mode, elicit=scripted(decline, decline, cancel)) as client:
        declined = payload(await client.call_tool("ask_once", {}))
        refused = payload(await client.call_tool("approve_only", {}))
        cancelled_result = await client.call_tool("ask_once", {})
    assert declined["output"] == {"declined": True}
    assert refused["output"] == {"approved": False}
    cancelled = payload(cancelled_result)
    assert cancelled_result.is_error is True
    assert cancelled["status"] == "cancelled"
    assert cancelled["error"]["code"] == "cancelled"


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_call_leaves_no_worker_process(tmp_path: Path, mode: str) -> None:
    pids: dict[str, int] = {}
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if not (message or "").startswith("worker="):
            return  # a keep-alive (webui.mcp.keepalive), not the workflow's report
        pids.update({k: int(v) for k, v in (part.split("=") for part in (message or "").split())})
        started.set()

    async with in_memory(TORTURE, tmp_path, mode) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("sleep", {"grandchild": True}, progress_callback=on_progress)

            tg.start_soon(call)
            with anyio.fail_after(CALL_TIMEOUT):
                await started.wait()
            tg.cancel_scope.cancel()
        await wait_until_gone([pids["worker"], pids["grandchild"]])
        # The server keeps serving after the cancellation.
        assert payload(await client.call_tool("progress", {}))["output"] == {"steps": 3}


@pytest.mark.parametrize("mode", MODES)
async def test_stdout_noise_from_a_handler_never_reaches_the_protocol_stream(
    tmp_path: Path, mode: str
) -> None:
    prepared.copy_prepared("store", tmp_path)  # migrated once per session
    async with connect(TORTURE, tmp_path, mode) as client:
        first = payload(await client.call_tool("noisy", {}))
        second = payload(await client.call_tool("noisy", {}))
        tools = await client.list_tools()
    assert first["output"] == second["output"] == {"ok": True}
    assert len(tools.tools) > 5


def bad_file_arguments(tmp_path: Path) -> list[tuple[Any, str]]:
    too_big = tmp_path / "too-big.bin"
    with too_big.open("wb") as fh:
        fh.truncate(50 * 1024 * 1024 + 1)
    return [
        ("notes.md", "relative paths are not accepted"),
        ("./notes.md", "relative paths are not accepted"),
        ("https://example.com/notes.md", "URLs are not accepted"),
        ("file:///etc/hostname", "URLs are not accepted"),
        ("data:text/plain;base64,aGVsbG8=", "data: content is not accepted"),
        ("aGVsbG8gd29ybGQsIHRoaXMgaXMgYmFzZTY0", "Base64 content is not accepted"),
        (str(tmp_path), "is not a regular file"),
        (str(tmp_path / "missing.txt"), "no such file"),
        (str(too_big), "larger than the 50 MB limit"),
        ({"id": "wf_0123456789abcdef"}, "is not of type 'string'"),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_every_bad_file_argument_is_a_tool_error_and_the_server_keeps_serving(
    tmp_path: Path, mode: str
) -> None:
    good = tmp_path / "ok.txt"
    good.write_text("fine\n", encoding="utf-8")
    cases = bad_file_arguments(tmp_path)
    async with in_memory(EXAMPLES / "files", tmp_path / "d", mode) as client:
        for value, message in cases:
            got = argument_error(await client.call_tool("summarize", {"document": value}))
            assert message in got, (value, got)
            assert "document" in got
        got = argument_error(
            await client.call_tool("summarize", {"document": str(good), "attachments": ["relative.txt"]})
        )
        assert "attachments" in got
        body = payload(await client.call_tool("summarize", {"document": str(good)}))
    assert body["status"] == "success" and body["output"]["lines"] == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_file_of_exactly_50_mb_is_accepted(tmp_path: Path, mode: str) -> None:
    exact = tmp_path / "exact.bin"
    with exact.open("wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    async with in_memory(EXAMPLES / "files", tmp_path / "d", mode) as client:
        body = payload(await client.call_tool("summarize", {"document": str(exact)}))
    assert body["output"]["bytes"] == 50 * 1024 * 1024


def argument_error(result: types.CallToolResult) -> str:
    """The message of a call whose arguments failed: a tool error result the model reads
    (SEP-1303), not a JSON-RPC error, and no run."""
    assert result.is_error is True, result
    body = payload(result)
    assert body["status"] == "failed" and "runId" not in body, body
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_are_tool_errors_naming_the_problem(tmp_path: Path, mode: str) -> None:
    async with in_memory(EXAMPLES / "hello", tmp_path, mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        cases = [
            ({}, "'name' is a required property (type: string)"),
            ({"name": "x", "times": "two"}, "times: 'two' is not of type 'number'"),
            ({"name": "x", "extra": 1}, "'extra' was unexpected"),
            ({"name": "x", "language": "de"}, "language"),
        ]
        for args, fragment in cases:
            got = argument_error(await client.call_tool("greet", args))
            assert got.startswith("Invalid arguments for tool 'greet': ") and fragment in got, got
        with pytest.raises(MCPError) as err:
            await client.call_tool("no_such_tool", {})
        assert err.value.code == -32602
        assert payload(await client.call_tool("greet", {"name": "ok"}))["status"] == "success"


@pytest.mark.parametrize("mode", MODES)
async def test_crashes_and_timeouts_become_concise_tool_errors(tmp_path: Path, mode: str) -> None:
    async with in_memory(TORTURE, tmp_path, mode) as client:
        crash = payload(await client.call_tool("segfault", {}))
        leak = payload(await client.call_tool("raise_error", {}))
        slow = payload(await client.call_tool("hang", {}))
    assert crash["status"] == "failed" and "SIGSEGV" in crash["error"]["message"]
    assert leak["error"] == {"code": "handler_error", "message": "The handler raised ValueError."}
    assert "hunter2" not in json.dumps(leak)
    assert slow["status"] == "timeout" and slow["error"]["code"] == "timeout"


async def test_the_worker_environment_layers_saved_auth_dotenv_and_explicit_variables(tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    auth.mkdir()
    (auth / "workflow-auth.json").write_text(
        json.dumps({"serverUrl": "https://saved.example", "adminKey": "saved-key"}), encoding="utf-8"
    )
    extra = ("--auth-dir", str(auth))
    prepared.copy_prepared("store", tmp_path / "d")  # migrated once per session
    async with connect(TORTURE, tmp_path / "d", "legacy", *extra, env={}) as client:
        saved = payload(await client.call_tool("env_probe", {}))["output"]
    async with connect(
        TORTURE, tmp_path / "d", "legacy", *extra, env={"STEAMHARNESS_SERVER_ADMIN_KEY": "explicit-key"}
    ) as client:
        explicit = payload(await client.call_tool("env_probe", {}))["output"]
    assert saved["dotenv"] == "dotenv-value"
    assert saved["serverUrl"] == "http://from-dotenv.invalid"  # the project's .env beats saved auth
    assert saved["adminKey"] == "saved-key"
    assert explicit["adminKey"] == "explicit-key"
    assert saved["cwd"] == str(TORTURE)
    assert saved["related"] == {}


@pytest.mark.dialects  # the stored request state read back after a restart, on PostgreSQL too
async def test_2026_request_state_is_sealed_and_survives_a_restart(tmp_path: Path, database_url: str) -> None:
    """A retry after the server restarted is recognised (not 'invalid state'): the run it
    names was interrupted, and the client is told so."""
    async with in_memory(
        TORTURE, tmp_path, "2026-07-28", database_url=database_url, elicit=scripted()
    ) as client:
        first = await client.session.call_tool("ask_once", {}, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult)
    assert first.request_state and first.request_state.startswith("v1.")
    (key,) = (first.input_requests or {}).keys()
    answer: types.InputResponses = {key: types.ElicitResult(action="accept", content={"name": "late"})}
    async with in_memory(
        TORTURE, tmp_path, "2026-07-28", database_url=database_url, elicit=scripted()
    ) as client:
        with pytest.raises(MCPError) as err:
            await client.session.call_tool(
                "ask_once", {}, input_responses=answer, request_state=first.request_state[:-4] + "AAAA"
            )
        assert err.value.code == -32602
        retried = await client.session.call_tool(
            "ask_once",
            {},
            input_responses=answer,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(retried, types.CallToolResult)
    body = payload(retried)
    assert body["status"] == "failed" and body["error"]["code"] == "interrupted"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mcp", "relative/dir"], "project folder does not exist"),
        (["mcp", str(EXAMPLES / "hello"), "--data-dir", "relative"], "--data-dir must be an absolute path"),
        (
            ["mcp", str(EXAMPLES / "hello"), "--file-store-dir", "x"],
            "--file-store-dir must be an absolute path",
        ),
        (["mcp", str(EXAMPLES / "hello"), "--related-project", "nodir"], "ALIAS=/absolute/dir"),
        (["mcp", str(EXAMPLES / "hello"), "--related-project", "a=rel"], "must be an absolute path"),
        (["structure", str(TORTURE / "missing")], "project folder does not exist"),
    ],
)
def test_bad_command_lines_fail_with_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = processes.run(
        [STEAMHARNESS, *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error:"), proc.stderr
    assert message in lines[0]


@pytest.mark.parametrize("kind", ["conversation", "kanban", None])
def test_projects_that_are_not_workflows_are_never_served(tmp_path: Path, kind: str | None) -> None:
    doc: dict[str, Any] = {"id": "11111111-1111-4111-8111-111111111111", "name": "x", "entrypoints": []}
    if kind:
        doc["projectType"] = kind
    (tmp_path / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    proc = processes.run(
        [STEAMHARNESS, "mcp", str(tmp_path), "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert "not a workflow project" in proc.stderr


def test_structure_prints_the_report(tmp_path: Path) -> None:
    proc = processes.run(
        [STEAMHARNESS, "structure", str(EXAMPLES / "hello")], capture_output=True, timeout=60
    )
    report = json.loads(proc.stdout)
    assert report["id"] == "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
    assert [e["id"] for e in report["entrypoints"]] == ["greet", "echo"]


def test_the_readme_client_config_works_as_written() -> None:
    """The README's stdio config names `steamharness` and `mcp /abs/dir` only."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert '"command": "steamharness", "args": ["mcp", "/absolute/path/to/greeter"]' in readme
    assert shutil.which("steamharness", path=os.path.dirname(STEAMHARNESS))
