"""Checking values against a JSON Schema can no longer freeze the server (issue 36, defects
1 and 9, and integers past JSON's safe range).

Before: a tool's arguments were checked with Python's backtracking `re` in a database thread
holding the GIL (one ~60 KB argument against `[a-z]+@` stopped /healthz for ~14 s; an
author's `(.*)(.*)…x` passed the load-time screening; `uniqueItems` compared pairwise); the
host checked an external server's schemas on the event loop; a `$ref` loop was accepted at
load and, like `format: regex` given 20,000 `(`, ended in a RecursionError; `1e308` reached
an integer param's handler as a different 309-digit number.

- Against a real `steamharness serve`: the headline attacks at the largest size a body
  allows, each while /healthz is probed (each probe bounded by `PROBE_TIMEOUT`, a hang guard:
  the old server answered none of them for minutes to hours); each call answers with a
  clear tool error (isError) naming the param, and nothing is left in the log as a
  traceback.
- In memory: the host's tool form and a browser's answer to an external server's form with
  hostile schemas, `$ref` loops at load, integers, `uniqueItems` as JSON Schema compares,
  the bounds and the deadline of a check, and that a check refuses to run on the event loop.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from sqlalchemy.engine import Engine
from starlette.datastructures import FormData

from tests.e2e.server import LiveServer
from tests.e2e.test_http_mcp import headers, open_session, sse_json
from tests.helpers import WAIT
from tests.security.handler_project import serving
from tests.store.test_interactions import question
from webui import validation
from webui.audit.log import AuditLog
from webui.errors import InvalidAnswer, InvalidArguments, ProjectError
from webui.events import EventHub
from webui.host.forms import unsupported_reasons
from webui.interactions.service import InteractionService
from webui.store import interactions as interaction_store
from webui.store.db import make_engine
from webui.validation import CheckRefused, SchemaUnusable, field_errors, problems, run_check
from webui.web import host_pages
from webui.web.host_views import tool_view
from webui.workflows.json_schema import check_input_schema
from webui.workflows.schema import validate_arguments

PROJECT = "5e2b7c1d-9a4f-4d3e-8b6a-1c0f9e8d7a6b"
PROBE_TIMEOUT = 5.0  # a hang guard per /healthz probe, not a speed check
PROBES = 3
# ~1 MiB of JSON in one argument: as large as a request body may be.
BIG = 1_000_000
MODERN = "2026-07-28"
AUTHOR_PATTERN = "(.*)" * 12 + "x"  # passed the old screening; Python's `re` is polynomial on it

HANDLERS = r"""
def echo(ctx):
    return {"got": sorted(ctx.params)}
"""


def schema_of(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": name,
        "title": name,
        "description": f"The {name} tool.",
        "handler": "h.py:echo",
        "timeoutSeconds": 30,
        "inputSchema": schema_of(properties),
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serving(
        tmp_path_factory.mktemp("argument-checks"),
        project_id=PROJECT,
        name="argument-checks",
        handlers=HANDLERS,
        entrypoints=[
            tool("email", {"a": {"type": "string", "pattern": "[a-z]+@"}}),
            tool("author", {"a": {"type": "string", "pattern": AUTHOR_PATTERN}}),
            tool("unique", {"items": {"type": "array", "uniqueItems": True}}),
            tool("regex", {"r": {"type": "string", "format": "regex"}}),
            tool("count", {"n": {"type": "integer"}}),
            tool("ints", {"xs": {"type": "array", "items": {"type": "integer"}}}),
        ],
    ) as live:
        yield live


@pytest.fixture(scope="module")
def session(server: LiveServer) -> tuple[str, str]:
    key = server.create_key("mallory")
    return key, open_session(server, key, PROJECT)


def call(server: LiveServer, session: tuple[str, str], name: str, args: dict[str, Any]) -> dict[str, Any]:
    key, sid = session
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": args}}
    r = httpx2.post(server.mcp_url(PROJECT), headers=headers(key, sid), json=body, timeout=WAIT)
    assert r.status_code == 200, r.text[:500]
    return sse_json(r)


def healthy(server: LiveServer) -> bool:
    r = httpx2.get(f"{server.base_url}/healthz", timeout=PROBE_TIMEOUT)
    return r.status_code == 200 and r.json()["status"] == "ok"


def attacked(server: LiveServer, session: tuple[str, str], name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The call's answer; /healthz probed while it is on its way (at least once, at most
    PROBES times: a probe that hangs past PROBE_TIMEOUT fails the test)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(call, server, session, name, args)
        for _ in range(PROBES):
            assert healthy(server), "/healthz did not answer while the call was checked"
            if pending.done():
                break
        return pending.result(timeout=WAIT)


def invalid_params(reply: dict[str, Any]) -> str:
    """The message of a tool error result for failed arguments (SEP-1303: the model reads it)."""
    assert reply["result"]["isError"] is True, str(reply)[:500]
    error = reply["result"]["structuredContent"]["error"]
    assert error["code"] == "invalid_params", error
    message: str = error["message"]
    assert len(message) < 2000  # clipped: never the argument itself
    assert len(reply["result"]["content"][0]["text"]) < 3000
    return message


def test_a_megabyte_argument_against_an_ordinary_pattern_is_refused_while_the_server_answers(
    server: LiveServer, session: tuple[str, str]
) -> None:
    message = invalid_params(attacked(server, session, "email", {"a": "a" * BIG}))
    assert "a: 'aaaa" in message and "does not match '[a-z]+@'" in message
    assert call(server, session, "email", {"a": "mallory@"})["result"]["isError"] is False


def test_an_authors_polynomial_pattern_is_linear_now(server: LiveServer, session: tuple[str, str]) -> None:
    message = invalid_params(attacked(server, session, "author", {"a": "a" * 100_000}))
    assert "a: 'aaaa" in message and "does not match" in message


def test_unique_items_of_many_objects_are_told_apart_by_hashing(
    server: LiveServer, session: tuple[str, str]
) -> None:
    # As many as a body may carry (the strict reader's counts of values and containers).
    items: list[Any] = [{"id": i, "name": "n"} for i in range(10_000)]
    items.append({"name": "n", "id": 0.0})  # the first again, as JSON Schema compares: found last
    message = invalid_params(attacked(server, session, "unique", {"items": items}))
    assert "items: " in message and "has non-unique elements" in message


def test_twenty_thousand_parentheses_as_a_regex_and_1e308_as_an_integer_are_invalid_arguments(
    server: LiveServer, session: tuple[str, str]
) -> None:
    message = invalid_params(call(server, session, "regex", {"r": "(" * 20_000}))
    assert "r: '((((" in message and "is not a 'regex'" in message
    key, sid = session
    body = (
        '{"jsonrpc": "2.0", "id": 8, "method": "tools/call",'
        ' "params": {"name": "count", "arguments": {"n": 1e308}}}'
    )
    r = httpx2.post(server.mcp_url(PROJECT), headers=headers(key, sid), content=body, timeout=WAIT)
    message = invalid_params(sse_json(r))  # not a 309-digit int handed to the handler
    assert "n: 1e+308 is not an integer within ±9007199254740991" in message
    log = server.log()
    assert "RecursionError" not in log and "Traceback" not in log


# --------------------------------------------------------------------------- what the model reads (SEP-1303)


def modern(server: LiveServer, key: str, params: dict[str, Any]) -> httpx2.Response:
    """A 2026-07-28 tools/call of `params` (name and arguments as given, even malformed)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    name = params.get("name")
    extra = {"Mcp-Name": name} if isinstance(name, str) else {}
    return httpx2.post(
        server.mcp_url(PROJECT),
        headers={**headers(key, None), "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", **extra},
        json={"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {**params, "_meta": meta}},
        timeout=WAIT,
    )


def modern_reply(r: httpx2.Response) -> dict[str, Any]:
    return r.json() if r.headers["content-type"].startswith("application/json") else sse_json(r)


HOSTILE = [
    ("count", {"n": "x" * BIG}, ["n: 'xxx", "... is not of type 'integer'"]),  # the value, cut
    ("count", {"k" * 100_000: 1}, ["Additional properties are not allowed ('kkk"]),  # a key, cut
    ("ints", {"xs": ["x"] * 10_000}, ["xs[9]: 'x' is not of type 'integer'", "; and 40 more"]),
    ("count", {"n": {"deep": [[["y" * 100_000]]]}}, ["n: {'deep'", "is not of type 'integer'"]),
]


def test_hostile_arguments_read_as_a_bounded_tool_error_in_both_eras_and_start_no_run(
    server: LiveServer,
) -> None:
    """Each is a result with isError (not -32602) whose message names the argument, what it
    takes and a cut of what it got: never the value whole, never more than 2,000
    characters, no run, one tool.failed audit event that quotes nothing of the value."""
    key = server.create_key("mallet")
    sid = open_session(server, key, PROJECT)
    runs = len(server.query("select id from runs"))
    for name, args, fragments in HOSTILE:
        for reply in (
            call(server, (key, sid), name, args),
            modern_reply(modern(server, key, {"name": name, "arguments": args})),
        ):
            message = invalid_params(reply)
            assert message.startswith(f"Invalid arguments for tool '{name}': "), message
            assert all(f in message for f in fragments), message
            assert "x" * 100 not in message and "k" * 100 not in message and "y" * 100 not in message
    assert len(server.query("select id from runs")) == runs
    failed = server.query(
        "select outcome, run_id, details from audit_events where event = 'tool.failed' and actor = :a",
        a="user:mallet",
    )
    assert [(r["outcome"], r["run_id"], r["details"] in (None, "null")) for r in failed] == [
        ("invalid_params", None, True)
    ] * (2 * len(HOSTILE))


@pytest.mark.parametrize(
    "params",
    [
        {"arguments": {"n": 1}},  # no name
        {"name": "count", "arguments": "n=1"},
        {"name": "count", "arguments": [1]},
        {"name": 7, "arguments": {}},
        {"name": "t" * 5_000, "arguments": {}},  # an unknown tool, named at length
    ],
    ids=["no-name", "arguments-a-string", "arguments-a-list", "name-a-number", "unknown-tool"],
)
def test_malformed_calls_and_unknown_tools_stay_json_rpc_invalid_params(
    server: LiveServer, session: tuple[str, str], params: dict[str, Any]
) -> None:
    key, sid = session
    body = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": params}
    old = sse_or_json(
        httpx2.post(server.mcp_url(PROJECT), headers=headers(key, sid), json=body, timeout=WAIT)
    )
    r = modern(server, key, params)
    assert r.status_code == 400, r.text[:300]
    # At 2026-07-28 a name that is no string cannot match its Mcp-Name header: -32020 first.
    codes = {-32602, -32020} if not isinstance(params.get("name"), str) else {-32602}
    assert old["error"]["code"] == -32602, str(old)[:300]
    for reply in (old, r.json()):
        assert "result" not in reply and reply["error"]["code"] in codes, str(reply)[:300]
        assert len(reply["error"]["message"]) < 1000 and "t" * 400 not in json.dumps(reply)


def sse_or_json(r: httpx2.Response) -> dict[str, Any]:
    assert r.status_code in (200, 400), r.text[:300]
    return modern_reply(r)


# --------------------------------------------------------------------------- in memory: the host


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def form_of(fields: dict[str, str]) -> FormData:
    return FormData(list(fields.items()))


@pytest.mark.anyio
async def test_the_hosts_tool_form_checks_an_external_servers_pattern_off_the_event_loop() -> None:
    import mcp_types as types

    hostile = types.Tool(
        name="lookup",
        input_schema={"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-z]+@"}}},
    )
    view = tool_view("srv", hostile)
    assert view.problem is None  # a form with one text field
    key = view.prefix + view.fields[0].key
    assert await host_pages._arguments(view, form_of({key: "a" * BIG}), None) is None
    assert "does not match '[a-z]+@'" in view.errors["a"] and len(view.errors["a"]) < 300
    assert await host_pages._arguments(view, form_of({key: "bob@"}), None) == {"a": "bob@"}

    # A schema the host cannot check with (a lookaround, a reference loop): the server that
    # wrote it judges the arguments itself; nothing here fails or recurses.
    for schema in (
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)a"}}},
        {
            "type": "object",
            "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}},
            "$ref": "#/$defs/x",
        },
        {"type": "object", "not": {"$ref": "#"}},
    ):
        assert await run_check(None, field_errors, schema, {"a": "b"}) == {}


@pytest.mark.anyio
async def test_a_browser_answer_to_an_external_servers_form_is_checked_in_linear_time(engine: Engine) -> None:
    hostile = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},  # catastrophic for `re`
        "required": ["a"],
    }
    assert unsupported_reasons(hostile) == []  # RE2 runs it: the host shows the form
    interaction_store.add_interaction(
        engine, row=question("ia_hostile", origin="host", requested_schema=hostile)
    )
    service = InteractionService(engine, AuditLog(), EventHub())
    with pytest.raises(InvalidAnswer, match=r"a: 'aaaa.*does not match '\^\(a\+\)\+\$'") as refused:
        await service.answer(
            "ia_hostile", action="accept", content={"a": "a" * 50_000 + "!"}, channel="browser"
        )
    assert len(refused.value.message) < 400  # the value is quoted clipped
    answered = await service.answer("ia_hostile", action="accept", content={"a": "aaa"}, channel="browser")
    assert answered.content == {"a": "aaa"}


@pytest.mark.anyio
async def test_the_host_leaves_an_external_servers_tool_result_unchecked_by_pythons_re() -> None:
    import mcp_types as types
    from mcp import Client
    from mcp.server.lowlevel import Server

    from webui.host.connection import unchecked_results

    output = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
    text = "a" * 50_000 + "!"  # exponential for `re`, which the SDK's check would run on the loop

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tool = types.Tool(name="t", input_schema={"type": "object"}, output_schema=output)
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content={"a": text})

    server = Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)
    async with Client(server) as client:
        unchecked_results(client)  # what the host does to each client it builds
        await client.list_tools()
        result = await client.call_tool("t", {})
    assert result.structured_content == {"a": text}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"a": {"type": "string", "pattern": "a(?!b)"}}, "a lookaround"),
        ({"a": {"type": "string", "pattern": "(a)\\1"}}, "a backreference"),
        ({"a": {"type": "string", "pattern": "a" * 2000}}, "a pattern of 2000 characters"),
    ],
)
def test_an_external_form_the_host_cannot_check_is_refused_with_the_reason(
    schema: dict[str, Any], why: str
) -> None:
    (reason,) = unsupported_reasons({"type": "object", "properties": schema})
    assert reason.startswith("the host cannot check answers to this form: /properties/a/pattern: refused:")
    assert why in reason


# --------------------------------------------------------------------------- in memory: load time


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (
            {
                "type": "object",
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a",
            },
            "/$defs/",
        ),
        ({"type": "object", "$ref": "#"}, "/$ref"),
        (
            {"type": "object", "properties": {"x": {"allOf": [{"not": {"$ref": "#/properties/x"}}]}}},
            "/properties/x/allOf/0/not/$ref",
        ),
        ({"type": "object", "$defs": {"a": {"anyOf": [{"$ref": "#"}]}}, "$ref": "#/$defs/a"}, "/"),
    ],
)
def test_a_ref_loop_is_refused_at_load_naming_where(schema: dict[str, Any], where: str) -> None:
    with pytest.raises(ProjectError, match="a reference loop") as refused:
        check_input_schema(schema, "s")
    assert str(refused.value.message).startswith(f"s{where}")


def test_a_ref_that_goes_into_the_value_is_no_loop() -> None:
    tree = {
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "properties": {"root": {"$ref": "#/$defs/node"}},
    }
    schema = json.loads(check_input_schema(tree, "s"))
    assert validate_arguments(schema, {"root": {"kids": [{"kids": []}]}}, tool="t") == {
        "root": {"kids": [{"kids": []}]}
    }


def test_a_regex_format_of_twenty_thousand_parentheses_is_an_invalid_argument() -> None:
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}}
    with pytest.raises(InvalidArguments, match=r"r: '\(\(\(.*' is not a 'regex'"):
        validate_arguments(schema, {"r": "(" * 20_000}, tool="t")
    assert validate_arguments(schema, {"r": "^[a-z]+(?:-[a-z]+)*$"}, tool="t") == {
        "r": "^[a-z]+(?:-[a-z]+)*$"
    }
    with pytest.raises(ProjectError, match="a pattern of 20000 characters"):
        check_input_schema({"type": "object", "properties": {"r": {"pattern": "(" * 20_000}}}, "s")


# --------------------------------------------------------------------------- in memory: integers

INTEGER = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "ns": {"type": "array", "items": {"type": "integer"}}},
}


@pytest.mark.parametrize(
    "bad",
    [1e308, 2.0**53, -(2.0**60), 2**53, -(2**53), 10**4000],
    ids=["1e308", "2.0^53", "-2.0^60", "2^53", "-2^53", "10^4000"],
)
def test_an_integer_past_jsons_safe_range_is_refused_naming_the_param(bad: Any) -> None:
    with pytest.raises(InvalidArguments, match=r"for tool 't': n: .*±9007199254740991") as refused:
        validate_arguments(INTEGER, {"n": bad}, tool="t")
    assert "Exceeds the limit" not in refused.value.message and len(refused.value.message) < 400
    with pytest.raises(InvalidArguments, match=r"ns\[1\]: .*±9007199254740991"):
        validate_arguments(INTEGER, {"ns": [1, bad]}, tool="t")


def test_integers_within_the_safe_range_or_the_schemas_own_bounds_arrive_exactly() -> None:
    top = 2**53 - 1
    assert validate_arguments(INTEGER, {"n": top, "ns": [-top, 2.0]}, tool="t") == {"n": top, "ns": [-top, 2]}
    wide = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10**30}}}
    assert validate_arguments(wide, {"n": 10**29}, tool="t") == {"n": 10**29}
    with pytest.raises(InvalidArguments, match="write a larger integer in digits"):
        validate_arguments(wide, {"n": 1e29}, tool="t")  # a float past 2^53 names no one integer
    with pytest.raises(InvalidArguments, match=r"n: .*±9007199254740991"):
        validate_arguments(wide, {"n": -(2**53)}, tool="t")  # the schema widened the top only
    number = {"type": "object", "properties": {"x": {"type": "number"}}}
    assert validate_arguments(number, {"x": 1e308}, tool="t") == {"x": 1e308}


# --------------------------------------------------------------------------- in memory: bounds


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([1, True], True),
        ([0, False, None, "", [], {}], True),
        ([{"a": 1, "b": [2.0]}, {"b": [2], "a": 1.0}], False),
        ([[1], [True]], True),
        ([{"a": 1}, {"a": 1, "b": None}], True),
        (["x"] * 2, False),
    ],
)
def test_unique_items_compare_as_json_schema_does(items: list[Any], unique: bool) -> None:
    found = problems({"type": "array", "uniqueItems": True}, items)
    assert (found == []) is unique


def test_a_value_too_deep_or_too_large_is_refused_before_it_is_checked() -> None:
    deep: Any = "x"
    for _ in range(validation.MAX_INSTANCE_DEPTH + 1):
        deep = [deep]
    with pytest.raises(CheckRefused, match="too deep to check"):
        problems({"type": "array"}, deep)
    with pytest.raises(CheckRefused, match="too large to check"):
        problems({"type": "array"}, [0] * (validation.MAX_INSTANCE_NODES + 1))
    with pytest.raises(InvalidArguments, match="for tool 't': too deep to check"):
        validate_arguments({"type": "object"}, {"a": deep}, tool="t")


def test_a_check_that_runs_past_its_deadline_is_refused() -> None:
    # Each level tries both branches: 2^40 paths through a value 40 levels deep.
    both = {"allOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}}]}
    value: Any = 1
    for _ in range(40):
        value = [value]
    with pytest.raises(CheckRefused, match=r"could not be checked within 0\.2 s"):
        problems(both, value, seconds=0.2)


def test_a_schema_past_the_bounds_cannot_be_used() -> None:
    wide = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(validation.MAX_SCHEMA_NODES)},
    }
    with pytest.raises(SchemaUnusable, match="more than"):
        problems(wide, {})
    assert field_errors(wide, {"p1": 1}) == {}  # the schema's owner judges


@pytest.mark.anyio
async def test_a_check_refuses_to_run_on_the_event_loop() -> None:
    with pytest.raises(RuntimeError, match="on the event loop"):
        problems({"type": "string"}, 1)
    with pytest.raises(RuntimeError, match="on the event loop"):
        field_errors({"type": "object"}, {})
    assert [e.message for e in await run_check(None, problems, {"type": "string"}, 1)] == [
        "1 is not of type 'string'"
    ]

    async def check_as(key: int) -> None:
        await run_check(key, problems, {"type": "string"}, "x")

    async with anyio.create_task_group() as tg:  # several at once share the checks' small pool
        for i in range(validation.CHECK_THREADS * 3):
            tg.start_soon(check_as, i % 5)


def test_load_time_checks_name_patterns_re2_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match=r"s/properties/a/pattern: refused: a lookaround"):
        check_input_schema({"type": "object", "properties": {"a": {"pattern": "(?<=x)a"}}}, "s")
    ecma = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\\u0041(?<n>b)\\cJ$"}}}
    schema = json.loads(check_input_schema(ecma, "s"))
    assert validate_arguments(schema, {"a": "Ab\n"}, tool="t") == {"a": "Ab\n"}
    # ECMA-262's white space, not RE2's ASCII one
    spaced = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\\S+\\s[^\\s]$"}}}
    schema = json.loads(check_input_schema(spaced, "s"))
    assert validate_arguments(schema, {"a": "x\u2028y"}, tool="t") == {"a": "x\u2028y"}
    with pytest.raises(InvalidArguments, match="does not match"):
        validate_arguments(schema, {"a": "x\u00a0y z"}, tool="t")
