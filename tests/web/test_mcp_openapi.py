"""The API document per MCP operation: `/openapi.json` describes each MCP method the
server really serves as its own operation, with its JSON-RPC params and result schemas, its
headers per protocol era and its statuses, and no method the server does not serve.

What is served is asked of the real app over HTTP (`in_process_server`: uvicorn in a thread of
the test process; nothing here needs a process of its own), not read from the tables the
document is built from: every method name the SDK's types know (both eras) is sent, and
what does not answer -32601 is served; a notification is answered 202 whatever it is, so
it is served where the server acts on it."""

from __future__ import annotations

import importlib
import itertools
import json
import pkgutil
import re
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any, get_args

import httpx2
import mcp_types
import mcp_types as types
import pytest
from jsonschema import Draft202012Validator
from mcp.server.lowlevel import Server
from mcp_types.methods import CLIENT_REQUESTS, validate_client_request
from pydantic import BaseModel

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_capabilities import reply_to
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR
from tests.helpers import WAIT
from tests.support import in_process_server
from tests.web.conftest import Web
from webui.mcp.openapi import MCP_PATH, METHODS_TAG, method_path, method_paths
from webui.mcp.operations import served_methods
from webui.mcp.server import build_server
from webui.web.state import app_state

pytestmark = pytest.mark.shares_app

# What the product documents name; the server may serve more, never less.
DOCUMENTED = {
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "notifications/cancelled",
}


def _document(web: Web) -> dict[str, Any]:
    r = web.client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def _served(web: Web) -> Server[Any]:
    """The lowlevel server the app's lifespan built (build_server) and serves."""
    server = app_state(web.client.app).gateway.manager.app
    assert isinstance(server, Server)
    return server


def _methods(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        item["x-mcp-method"]: item["post"]
        for path, item in doc["paths"].items()
        if path.startswith(MCP_PATH + "#")
    }


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    assert ref.startswith("#/components/schemas/"), ref
    return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def test_each_method_is_one_operation_with_its_id_body_params_and_result(web: Web) -> None:
    doc = _document(web)
    server = _served(web)
    handlers = server._request_handlers  # pyright: ignore[reportPrivateUsage]
    ops = _methods(doc)
    assert set(ops) >= DOCUMENTED
    ids = [op["operationId"] for op in ops.values()]
    assert len(set(ids)) == len(ids)
    assert ops["tools/call"]["operationId"] == "mcp.tools.call"
    for method, op in ops.items():
        assert op["x-mcp-method"] == method
        assert METHODS_TAG in op["tags"]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert body["properties"]["method"] == {"const": method}
        params = body["properties"]["params"]
        assert _resolve(doc, params).get("type") == "object", method
        if method in handlers:  # the params model the server validates against
            model = handlers[method].params_type.__name__
            assert params["$ref"].endswith(f"/mcp.{model}") or params["$ref"].endswith(f"/mcp.{model}-Input")
        if method.startswith("notifications/"):
            assert "202" in op["responses"] and "200" not in op["responses"]
            continue
        ok = op["responses"]["200"]["content"]
        assert set(ok) == {"application/json", "text/event-stream"}
        result = ok["application/json"]["schema"]["properties"]["result"]
        arms = result.get("anyOf", [result])
        assert arms and all(
            _resolve(doc, arm).get("type") == "object" or "allOf" in _resolve(doc, arm) for arm in arms
        ), method
    cancelled = ops["notifications/cancelled"]["requestBody"]["content"]["application/json"]["schema"]
    assert "requestId" in _resolve(doc, cancelled["properties"]["params"])["properties"]


# --------------------------------------------------------------------------- served, asked live

HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
ERAS = (HANDSHAKE, MODERN)
METHOD_NOT_FOUND = -32601
CONTROL = "steamharness/no-such-method"  # served by no one: the probe's own check
ACCEPT = "application/json, text/event-stream"
NO_THING = "test://nothing-here"
# Params each method validates with (the SDK's surface check comes before the lookup, so a
# method sent bad params would say -32602 even where it is not served); checked below.
VALID_PARAMS: dict[str, dict[str, Any]] = {
    "initialize": {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
    "tools/call": {"name": "greet", "arguments": {"name": "Probe"}},
    "prompts/get": {"name": "p"},
    "resources/read": {"uri": NO_THING},
    "resources/subscribe": {"uri": NO_THING},
    "resources/unsubscribe": {"uri": NO_THING},
    "logging/setLevel": {"level": "info"},
    "completion/complete": {
        "ref": {"type": "ref/prompt", "name": "p"},
        "argument": {"name": "a", "value": "b"},
    },
    "subscriptions/listen": {"notifications": {}},
    "tasks/get": {"taskId": "no-such-task"},
    "tasks/cancel": {"taskId": "no-such-task"},
    "tasks/result": {"taskId": "no-such-task"},
    "tasks/update": {"taskId": "no-such-task", "inputResponses": {}},
}
# The params field a 2026-07-28 request repeats in its Mcp-Name header.
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# The client notifications nothing in this server acts on (each answered 202 and dropped).
NOT_ACTED_ON = {
    "notifications/progress": "the server asks the client for no progress (its requests carry no "
    "progress token), so there is nothing to report progress on",
    "notifications/roots/list_changed": "the server keeps no roots: a run asks roots/list each time",
    "notifications/tasks/status": "the 2025-11-25 era's tasks are not served",
}
# The 2025-11-25 handshake's last step, which the SDK's runner takes: it changes nothing a
# client could see (a session serves from its initialize on), so no probe can tell it.
HANDSHAKE_STEP = "notifications/initialized"
TASKS = "io.modelcontextprotocol/tasks"
CALL_SECONDS = 8.0  # how long the call a cancellation is tried on works, if nothing ends it
_ids = itertools.count(100)


def _era_modules() -> list[ModuleType]:
    """The installed mcp_types' per-era modules (`_v2025_11_25`, `_v2026_07_28`, ...)."""
    return [
        importlib.import_module(f"mcp_types.{info.name}")
        for info in pkgutil.iter_modules(mcp_types.__path__)
        if re.fullmatch(r"_v\d{4}_\d{2}_\d{2}", info.name)
    ]


def _sdk_methods(kind: str) -> set[str]:
    """The literal `method` of every client request (or notification) type of mcp_types:
    each era's `Client<kind>` and the combined one."""
    models: list[type[BaseModel]] = []
    for module in [mcp_types, *_era_modules()]:
        union = getattr(module, f"Client{kind}")
        models += list(get_args(union)) or [union]
    return {value for model in models for value in get_args(model.model_fields["method"].annotation)}


def _result_schema(op: dict[str, Any]) -> dict[str, Any]:
    return op["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["result"]


class Probe:
    """One client of the live server: a 2025-11-25 session (initialized), and stateless
    2026-07-28 requests."""

    def __init__(self, live: LiveServer, key: str) -> None:
        self.url = live.mcp_url(FIXTURE)
        self.key = key
        opened = self.post(HANDSHAKE, "initialize", VALID_PARAMS["initialize"], session=False)
        self.sid = opened.headers["mcp-session-id"]
        assert self.notify(HANDSHAKE, HANDSHAKE_STEP, {}).status_code == 202

    def headers(
        self, era: str, method: str, params: dict[str, Any], *, session: bool = True
    ) -> dict[str, str]:
        h = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {self.key}"}
        if era == MODERN:
            h |= {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
            name = params.get(NAMED.get(method, "taskId" if method.startswith("tasks/") else ""))
            if name is not None:
                h["Mcp-Name"] = str(name)
        elif session:
            h |= {"MCP-Protocol-Version": HANDSHAKE, "Mcp-Session-Id": self.sid}
        return h

    @staticmethod
    def params(era: str, params: dict[str, Any], **meta: Any) -> dict[str, Any]:
        if era == MODERN:
            meta = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
                **meta,
            }
        return {**params, "_meta": meta} if meta else params

    def body(self, era: str, method: str, params: dict[str, Any], **meta: Any) -> tuple[int, dict[str, Any]]:
        request_id = next(_ids)
        sent = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": self.params(era, params, **meta),
        }
        return request_id, sent

    def post(self, era: str, method: str, params: dict[str, Any], *, session: bool = True) -> httpx2.Response:
        _, body = self.body(era, method, params)
        headers = self.headers(era, method, params, session=session)
        return httpx2.post(self.url, headers=headers, json=body, timeout=WAIT)

    def request(self, era: str, method: str) -> tuple[int, dict[str, Any]]:
        """The HTTP status and reply of `method` with valid params; a 2025-11-25 initialize
        opens (and ends) a session of its own."""
        params = VALID_PARAMS.get(method, {})
        fresh = era == HANDSHAKE and method == "initialize"
        request_id, body = self.body(era, method, params)
        headers = self.headers(era, method, params, session=not fresh)
        response = httpx2.post(self.url, headers=headers, json=body, timeout=WAIT)
        if fresh and "mcp-session-id" in response.headers:
            ended = {
                **self.headers(HANDSHAKE, method, params, session=False),
                "Mcp-Session-Id": response.headers["mcp-session-id"],
            }
            assert httpx2.delete(self.url, headers=ended, timeout=WAIT).status_code == 200
        return response.status_code, reply_to(response, request_id)

    def modern(self, method: str, params: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
        """The reply to a 2026-07-28 request of a client declaring `capabilities`."""
        caps = {"io.modelcontextprotocol/clientCapabilities": capabilities}
        request_id, body = self.body(MODERN, method, params, **caps)
        response = httpx2.post(
            self.url, headers=self.headers(MODERN, method, params), json=body, timeout=WAIT
        )
        return reply_to(response, request_id)

    def notify(self, era: str, method: str, params: dict[str, Any]) -> httpx2.Response:
        headers = self.headers(era, method, params)
        note = {"jsonrpc": "2.0", "method": method, "params": params}
        return httpx2.post(self.url, headers=headers, json=note, timeout=WAIT)

    def cancellation_ends_a_call(self, era: str) -> bool:
        """Whether `notifications/cancelled` ends a tools/call in flight: the call works for
        CALL_SECONDS; once its stream shows it running (a progress notification), its
        cancellation is posted (202). Acted on, the call ends without its result (at
        2025-11-25 with -32800); dropped, the call's own result comes."""
        params = {"name": "slow_compute", "arguments": {"seconds": CALL_SECONDS}}
        call_id, body = self.body(era, "tools/call", params, progressToken="probe")
        headers = self.headers(era, "tools/call", params)
        cancel = {"requestId": call_id, "reason": "probe"}
        sent = False
        with (
            httpx2.Client(timeout=WAIT) as client,
            client.stream("POST", self.url, headers=headers, json=body) as r,
        ):
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), (
                r.status_code
            )
            for line in r.iter_lines():
                if not line.startswith("data:") or not line[5:].strip():
                    continue
                message = json.loads(line[5:])
                if message.get("method") == "notifications/progress" and not sent:
                    assert self.notify(era, "notifications/cancelled", cancel).status_code == 202
                    sent = True
                elif message.get("id") == call_id:
                    assert sent, f"the call ended before it reported progress: {message}"
                    if era == HANDSHAKE and "error" in message:
                        assert message["error"]["code"] == -32800, message
                    return "result" not in message
        assert sent, "the call never reported progress"
        return True  # the stream ended with no reply: the call was ended


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The app served over HTTP in this process, serving the conformance fixture project."""
    with in_process_server(tmp_path_factory.mktemp("operations")) as server:
        server.add_project(FIXTURE_DIR, FIXTURE)
        yield server


@pytest.fixture(scope="module")
def live_doc(live: LiveServer) -> dict[str, Any]:
    r = httpx2.get(f"{live.base_url}/openapi.json", timeout=WAIT)
    assert r.status_code == 200
    return r.json()


def test_the_documented_methods_are_exactly_those_a_live_server_serves_in_each_era(
    live: LiveServer, live_doc: dict[str, Any]
) -> None:
    requests, notifications = _sdk_methods("Request"), _sdk_methods("Notification")
    assert {"initialize", "ping", "tools/call", "server/discover"} <= requests  # the types were read
    # A new client notification of the SDK needs a decision here: a probe, or why nothing acts on it.
    assert notifications == {"notifications/cancelled", HANDSHAKE_STEP} | set(NOT_ACTED_ON)
    for method, version in CLIENT_REQUESTS:  # the probe's params pass the SDK's surface check
        if version in ERAS:
            validate_client_request(method, version, Probe.params(version, VALID_PARAMS.get(method, {})))
    probe = Probe(live, live.create_key("prober"))
    ops = _methods(live_doc)
    documented = {era: {m for m, op in ops.items() if era in op["x-mcp-eras"]} for era in ERAS}
    noted = {
        m
        for m, op in ops.items()
        if "id" not in op["requestBody"]["content"]["application/json"]["schema"]["properties"]
    }
    served: dict[str, set[str]] = {}
    for era in ERAS:
        answers = {m: probe.request(era, m) for m in sorted(requests | (set(ops) - noted) | {CONTROL})}
        replies = {m: reply for m, (_, reply) in answers.items()}
        assert replies[CONTROL]["error"]["code"] == METHOD_NOT_FOUND, replies[CONTROL]
        served[era] = {m for m, r in replies.items() if r.get("error", {}).get("code") != METHOD_NOT_FOUND}
        for method in set(ops) - noted - served[era]:  # what the era answers instead, as the page says
            status = answers[method][0]
            said = f"{status}, -32601" if status != 200 else "-32601"
            assert f"{era}" in ops[method]["description"] and said in ops[method]["description"], (
                era,
                method,
            )
        for method in sorted(notifications | noted):  # every notification is accepted, served or not
            assert probe.notify(era, method, {}).status_code == 202, (era, method)
        if probe.cancellation_ends_a_call(era):
            served[era].add("notifications/cancelled")
        if era == HANDSHAKE:
            served[era].add(HANDSHAKE_STEP)
    assert served == documented
    assert set(ops) == served[HANDSHAKE] | served[MODERN]


def test_a_live_tasks_input_requests_fit_the_documented_result(
    live: LiveServer, live_doc: dict[str, Any]
) -> None:
    """A task asking a person, the client's model and its roots at once: tasks/get's result,
    with its three kinds of inputRequests, is valid against the documented result schema."""
    probe = Probe(live, live.create_key("tasker"))
    caps = {"elicitation": {}, "sampling": {}, "roots": {}, "extensions": {TASKS: {}}}
    created = probe.modern("tools/call", {"name": "together_task", "arguments": {}}, caps)["result"]
    task_id = created["taskId"]
    deadline = time.monotonic() + WAIT
    while True:  # each tasks/get is a request of its own; the bound is WAIT
        got = probe.modern("tasks/get", {"taskId": task_id}, caps)["result"]
        if len(got.get("inputRequests", {})) == 3:
            break
        assert time.monotonic() < deadline, got
    assert {r["method"] for r in got["inputRequests"].values()} == {
        "elicitation/create",
        "sampling/createMessage",
        "roots/list",
    }
    schema = _result_schema(_methods(live_doc)["tasks/get"])
    Draft202012Validator({**schema, "components": live_doc["components"]}).validate(got)
    probe.modern("tasks/cancel", {"taskId": task_id}, caps)


def test_params_and_results_are_the_sdk_types(web: Web) -> None:
    doc = _document(web)
    ops = _methods(doc)
    schemas = doc["components"]["schemas"]

    def body(method: str) -> dict[str, Any]:
        return ops[method]["requestBody"]["content"]["application/json"]["schema"]["properties"]

    def result(method: str) -> dict[str, Any]:
        return ops[method]["responses"]["200"]["content"]["application/json"]["schema"]["properties"][
            "result"
        ]

    call_params = _resolve(doc, body("tools/call")["params"])
    assert {"name", "arguments"} <= set(call_params["properties"]) and "name" in call_params["required"]
    call_arms = {arm["$ref"].rsplit("/", 1)[1] for arm in result("tools/call")["anyOf"]}
    assert {"mcp.CallToolResult", "mcp.InputRequiredResult", "mcp.CreateTaskResult"} <= call_arms
    assert "isError" in schemas["mcp.CallToolResult"]["properties"]
    assert "taskId" in _resolve(doc, body("tasks/get")["params"])["required"]
    assert "inputResponses" in _resolve(doc, body("tasks/update")["params"])["properties"]
    assert result("tasks/get")["$ref"].endswith("/mcp.GetTaskResult")
    # a task's pending questions: forms, and the requests only the client answers (the SDK's InputRequest)
    detail = schemas["mcp.GetTaskResult"]["allOf"][1]["properties"]["inputRequests"]["additionalProperties"]
    asked = {_resolve(doc, arm)["properties"]["method"]["const"] for arm in detail["anyOf"]}
    assert asked == {"elicitation/create", "sampling/createMessage", "roots/list"}
    assert result("tasks/cancel")["$ref"].endswith("/mcp.TaskAcknowledged")
    assert "tools" in _resolve(doc, result("tools/list"))["properties"]
    assert "protocolVersion" in _resolve(doc, body("initialize")["params"])["properties"]
    assert "id" not in body("notifications/initialized")
    assert "id" in body("ping")


def _headers(op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in op["parameters"] if p["in"] == "header"}


def test_headers_per_protocol_era_and_statuses(web: Web) -> None:
    ops = _methods(_document(web))
    call = _headers(ops["tools/call"])
    assert {"Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"} <= set(call)
    assert "`name`" in call["Mcp-Name"]["description"]
    assert "`uri`" in _headers(ops["resources/read"])["Mcp-Name"]["description"]
    assert "`name`" in _headers(ops["prompts/get"])["Mcp-Name"]["description"]
    assert "Mcp-Name" not in _headers(ops["tools/list"])
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):  # refused -32021 at 2025-11-25
        task = _headers(ops[method])
        assert "`taskId`" in task["Mcp-Name"]["description"]
        assert not task["Mcp-Session-Id"]["required"] and not task["Mcp-Method"]["required"]
        assert ops[method]["x-mcp-eras"] == ["2025-11-25", "2026-07-28"]
        assert "always answered -32021" in ops[method]["description"]
    cancel = ops["notifications/cancelled"]
    assert cancel["x-mcp-eras"] == ["2025-11-25"] and _headers(cancel)["Mcp-Session-Id"]["required"]
    assert "Mcp-Method" not in _headers(cancel)
    init = ops["initialize"]
    assert "404, -32601" in init["description"] and "-32602" not in init["description"]
    assert "Mcp-Session-Id" not in _headers(init) and "Mcp-Method" not in _headers(init)
    assert "Mcp-Session-Id" in init["responses"]["200"]["headers"]
    assert "Mcp-Session-Id" not in _headers(ops["server/discover"])
    for method, op in ops.items():
        assert op["security"] == [{"bearer": []}]
        assert {"400", "401", "403", "404", "413", "421", "429"} <= set(op["responses"]), method
        assert "-32020" in op["responses"]["400"]["description"]
        assert {p["name"] for p in op["parameters"] if p["in"] != "header"} >= {"project_id", "target"}


def test_the_document_stays_openapi_3_1(web: Web) -> None:
    """A structural check (openapi-spec-validator is not installed): the version, path
    keys, templated path params declared, operationIds unique, every $ref resolves."""
    doc = _document(web)
    assert doc["openapi"].startswith("3.1")
    ids: list[str] = []
    for path, item in doc["paths"].items():
        assert path.startswith("/"), path
        for verb, op in item.items():
            if verb.startswith("x-"):
                continue
            assert verb in {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert set(re.findall(r"{([^}]+)}", path)) == declared, (path, verb)
            if "operationId" in op:
                ids.append(op["operationId"])
    assert len(ids) == len(set(ids))
    names = set(doc["components"]["schemas"])
    assert all(re.fullmatch(r"[A-Za-z0-9.\-_]+", n) for n in names)
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in names, ref
    real = doc["paths"][MCP_PATH]  # the one real endpoint stays documented
    assert set(real) >= {"post", "get", "delete"}


async def _nothing(ctx: Any, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


def test_a_newly_served_method_is_in_the_document_at_once() -> None:
    server = build_server(bridge=None, state_key=b"k" * 32, state_ttl=60)  # type: ignore[arg-type]
    server.add_request_handler("example/thing", types.RequestParams, _nothing)
    paths, _ = method_paths(server)
    assert method_path("example/thing") in paths
    assert paths[method_path("example/thing")]["post"]["operationId"] == "mcp.example.thing"
    # a server without the tasks extension lists no task method
    assert not any(m.method.startswith("tasks/") for m in served_methods(server))
