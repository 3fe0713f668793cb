"""`steamharness mcp` on a project with problems (issue 38, item 6), driven by the Python SDK
client over a real stdio process, in both protocol eras: the server starts (initialize or
server/discover works), lists the tools that parsed, and answers every tools/call with an
`isError` result naming every problem at its file and line (never "Connection closed"); it
logs the problems to stderr; the project's code never runs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from tests.cli.test_project_check import expected
from tests.helpers import WAIT
from tests.mcp.test_stdio_protocol import MODES, server_params
from tests.workflows.test_handler_check import broken_project
from webui.mcp.stdio import problems_text
from webui.workflows.project import ProjectReading

pytestmark = pytest.mark.anyio


async def call_and_log(project: Path, data: Path, mode: str) -> tuple[list[str], types.CallToolResult, str]:
    """The tools listed, one call's result and what the server wrote to stderr."""
    with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(WAIT):
        async with Client(stdio_client(server_params(project, data), errlog=errlog), mode=mode) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool(tools[0] if tools else "anything", {"who": "x"})
        errlog.seek(0)
        return tools, result, errlog.read()


@pytest.mark.parametrize("mode", MODES)
async def test_a_project_with_broken_handlers_answers_every_call_with_all_its_problems(
    tmp_path: Path, mode: str
) -> None:
    root = broken_project(tmp_path / "p")
    tools, result, stderr = await call_and_log(root, tmp_path / "data", mode)
    # The entrypoints whose package.json entry parsed are listed.
    assert tools == ["greet", "missing_function", "two_args", "async_one"]
    assert result.is_error
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    told = result.content[0].text.splitlines()
    assert told[0].startswith(f"The workflow project in {root} cannot run: 5 problems")
    for line, start in zip(told[1:], expected(root), strict=True):
        assert line.startswith(f"- {start}"), (line, start)
    for start in expected(root):
        assert start in stderr


@pytest.mark.parametrize("mode", MODES)
async def test_a_package_json_that_is_not_json_is_told_to_the_client(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "package.json").write_text('{\n  "id": "x",\n  "entrypoints": [\n}\n', encoding="utf-8")
    tools, result, stderr = await call_and_log(root, tmp_path / "data", mode)
    assert tools == []
    assert result.is_error and isinstance(result.content[0], types.TextContent)
    problem = f"{root}/package.json: invalid JSON at line 4, column 1"
    assert problem in result.content[0].text and problem in stderr


async def test_one_bad_field_of_many_is_not_the_only_one_told(tmp_path: Path) -> None:
    root = broken_project(tmp_path / "p")
    package = json.loads((root / "package.json").read_text())
    package["name"] = ""
    (root / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
    _, result, _ = await call_and_log(root, tmp_path / "data", "legacy")
    assert isinstance(result.content[0], types.TextContent)
    text = result.content[0].text
    assert "cannot run: 6 problems" in text and "name: expected a non-empty string" in text


def test_the_problems_are_counted_in_the_right_number(tmp_path: Path) -> None:
    one = problems_text(ProjectReading(root=tmp_path, project=None, problems=("package.json: bad",)))
    assert one.splitlines()[0].endswith("cannot run: 1 problem (fix it, then restart this MCP server):")
    two = problems_text(ProjectReading(root=tmp_path, project=None, problems=("a: bad", "b: bad")))
    assert two.splitlines()[0].endswith("cannot run: 2 problems (fix them, then restart this MCP server):")
