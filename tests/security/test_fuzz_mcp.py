"""A property-based fuzz of the MCP endpoint `/api/workflows/{id}/mcp` of a real
`steamharness serve`, in both protocol eras: random methods, ids of every JSON type,
params of random shapes, batches, duplicate keys, numbers past any float, deep nesting,
odd Content-Type and Accept headers. Whatever comes in, the answer is a JSON-RPC result or
error (or a bare 202 for what the server accepts without answering), never a 5xx, never a
Python traceback or pydantic internals, and the server logs no traceback.

Reproducible: hypothesis runs derandomized (the examples follow from the test's code), with
no example database, and a bounded number of examples per test.

Left out on purpose, because another engineer of this hardening round owns the fix:
- 2025-11-25 messages that are not a well-formed JSON-RPC envelope (batches, a non-object
  body, a wrong `jsonrpc`, a non-string `method`, a non-object `params`): the SDK's parse
  error still carries pydantic's validation report (h-edges: batch error internals);
- 2025-11-25 ids that are not a string or an integer (objects, lists, floats, booleans,
  null): the SDK accepts them silently with a 202 (h-edges: object ids);
- duplicate keys are sent (the server may accept the last one or refuse the document),
  only the "no 5xx, no internals" property is checked here (h-edges: strict duplicates).
The 2026-07-28 era gets every shape, invalid envelopes included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.e2e.server import HELLO, LiveServer
from tests.security.fuzz_server import hello_server

pytestmark = pytest.mark.slow

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
WAIT = 30.0  # bound on one answer (a tools/call that passes validation runs a workflow)
META_VERSION = "io.modelcontextprotocol/protocolVersion"
MODERN_META = {
    META_VERSION: MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
# What must never reach a client: a traceback, a source location, pydantic's report.
LEAKS = re.compile(
    r"Traceback \(most recent call last\)|File \"/|validation errors? for |\[type=[a-z_]+, "
    r"|input_value=|errors\.pydantic\.dev|pydantic_core"
)
FUZZ = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------- JSON text
# Documents are built as trees and written by `encode`, so a document may hold what
# json.dumps cannot write: duplicate keys, numbers past a float, nesting of any depth.


@dataclass(frozen=True)
class Obj:
    """A JSON object as written: its pairs in order, a key possibly repeated."""

    pairs: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class RawNumber:
    text: str


@dataclass(frozen=True)
class Nested:
    """`depth` arrays, one in another, around `inner`."""

    depth: int
    inner: Any


def encode(value: Any) -> str:
    if isinstance(value, Obj):
        return "{" + ",".join(f"{json.dumps(k)}:{encode(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return encode(Obj(tuple(value.items())))
    if isinstance(value, list | tuple):
        return "[" + ",".join(encode(v) for v in value) + "]"
    if isinstance(value, RawNumber):
        return value.text
    if isinstance(value, Nested):
        return "[" * value.depth + encode(value.inner) + "]" * value.depth
    return json.dumps(value)


huge_numbers = st.sampled_from(
    ["1e999999", "-1e999999", "1e400", "9" * 400, "-" + "9" * 5000, "1" + "0" * 4400, "1.5e-99999", "0.1e1"]
).map(RawNumber)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=24),
    huge_numbers,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=12), inner, max_size=4),
        st.builds(Nested, st.sampled_from([2, 64, 180, 1000, 20000]), inner),
    ),
    max_leaves=10,
)
TOOLS = ["echo", "greet"]
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "elicitation/create",
    "sampling/createMessage",
    "roots/list",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "",
]
methods = st.one_of(st.sampled_from(METHODS), st.text(max_size=30))
string_or_int_ids = st.one_of(
    st.integers(min_value=-(2**200), max_value=2**200), st.text(max_size=40), st.just(""), st.just(0)
)
any_ids = st.one_of(
    string_or_int_ids,
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    huge_numbers,
    st.lists(scalars, max_size=2),
    st.dictionaries(st.text(max_size=6), scalars, max_size=2),
)
# Arguments shaped like a tool's (sometimes valid: the workflow then runs).
echo_arguments = st.fixed_dictionaries({"text": st.text(max_size=40)})
greet_arguments = st.fixed_dictionaries(
    {"name": st.text(max_size=20)},
    optional={
        "times": st.one_of(st.integers(min_value=-3, max_value=3), st.floats(), huge_numbers),
        "shout": json_values,
        "language": st.sampled_from(["en", "fr", "de", ""]),
    },
)
arguments = st.one_of(echo_arguments, greet_arguments, json_values)
meta = st.one_of(
    st.fixed_dictionaries({}, optional={"progressToken": any_ids, "x/y": json_values}),
    json_values,
)
param_fields = {
    "name": st.one_of(st.sampled_from([*TOOLS, "nope"]), json_values),
    "arguments": arguments,
    "cursor": st.one_of(st.text(max_size=30), json_values),
    "protocolVersion": st.one_of(st.sampled_from([LEGACY, MODERN, "2024-11-05", "1999-01-01"]), json_values),
    "capabilities": st.one_of(st.just({}), st.just({"elicitation": {}}), json_values),
    "clientInfo": st.one_of(st.just({"name": "fuzz", "version": "1"}), json_values),
    "requestState": st.one_of(st.text(max_size=60), json_values),
    "inputResponses": json_values,
    "requestId": any_ids,
    "progress": json_values,
    "level": st.one_of(st.sampled_from(["debug", "info", "emergency"]), json_values),
    "uri": st.one_of(st.sampled_from(["file:///etc/passwd", "workflow://x"]), st.text(max_size=20)),
    "ref": json_values,
    "argument": json_values,
}
dict_params = st.fixed_dictionaries({}, optional=param_fields)


@dataclass(frozen=True)
class Message:
    method: str | None
    id: Any  # `Absent` when the message has none
    params: Any  # `Absent` when the message has none
    jsonrpc: Any = "2.0"
    duplicate: tuple[str, Any] | None = None  # a key written twice, the second value here
    extra: tuple[tuple[str, Any], ...] = ()  # result/error/unknown members

    def tree(self) -> Obj:
        pairs: list[tuple[str, Any]] = []
        if self.jsonrpc is not ABSENT:
            pairs.append(("jsonrpc", self.jsonrpc))
        if self.id is not ABSENT:
            pairs.append(("id", self.id))
        if self.method is not None:
            pairs.append(("method", self.method))
        if self.params is not ABSENT:
            pairs.append(("params", self.params))
        pairs.extend(self.extra)
        if self.duplicate is not None:
            pairs.append(self.duplicate)
        return Obj(tuple(pairs))


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()
duplicates = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["id", "method", "params", "jsonrpc"]), json_values),
)
# At 2025-11-25 the repeated key's last value keeps the envelope well formed (see above).
legacy_duplicates = st.one_of(
    st.none(),
    st.tuples(st.just("id"), string_or_int_ids),
    st.tuples(st.just("method"), methods),
    st.tuples(st.just("params"), dict_params),
    st.tuples(st.just("jsonrpc"), st.just("2.0")),
)


@st.composite
def legacy_messages(draw: st.DrawFn) -> Message:
    """A well-formed 2025-11-25 envelope (see the module's note) with anything inside."""
    method = draw(methods)
    notification = draw(st.booleans()) and method.startswith("notifications/")
    return Message(
        method=method,
        id=ABSENT if notification else draw(string_or_int_ids),
        params=draw(
            st.one_of(st.just(ABSENT), dict_params, st.dictionaries(st.text(max_size=8), json_values))
        ),
        duplicate=draw(legacy_duplicates),
    )


@st.composite
def modern_messages(draw: st.DrawFn) -> Message:
    """Any JSON-RPC-ish shape at 2026-07-28; mostly with the `_meta` envelope it needs."""
    method = draw(st.one_of(methods, st.just(None), json_values))
    params = draw(st.one_of(st.just(ABSENT), dict_params, json_values))
    if isinstance(params, dict) and draw(st.integers(0, 4)):
        params = {**params, "_meta": draw(st.one_of(st.just(MODERN_META), st.just(MODERN_META), meta))}
    extra = draw(
        st.lists(st.tuples(st.sampled_from(["result", "error", "x-unknown"]), json_values), max_size=2).map(
            tuple
        )
    )
    return Message(
        method=method,  # type: ignore[arg-type]
        id=draw(st.one_of(st.just(ABSENT), any_ids)),
        params=params,
        jsonrpc=draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2, ABSENT])),
        duplicate=draw(duplicates),
        extra=extra,
    )


content_types = st.sampled_from(
    [
        "application/json",
        "application/json",
        "application/json",
        "application/json; charset=utf-8",
        "application/JSON",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json-rpc",
        "",
        None,
    ]
)
# Mostly the admin key; sometimes none, a wrong one, or another scheme.
credentials = st.sampled_from(["admin", "admin", "admin", "admin", "admin", "none", "wrong", "basic"])
accepts = st.sampled_from(
    [ACCEPT, ACCEPT, ACCEPT, "*/*", "application/json", "text/event-stream", "text/html", None]
)


def parses(body: bytes) -> bool:
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


def ascii_header(value: Any) -> str | None:
    """A header value a client can send for `value` (None: leave the header out)."""
    if isinstance(value, str) and value.isascii() and value.isprintable() and value.strip() == value:
        return value
    return None


# --------------------------------------------------------------------------- the server


@dataclass
class Endpoint:
    server: LiveServer
    http: httpx2.Client
    session_id: str

    @property
    def url(self) -> str:
        return self.server.mcp_url(HELLO)

    def headers(
        self, *, version: str | None, content_type: str | None, accept: str | None, key: str = "admin"
    ) -> dict[str, str]:
        schemes = {
            "admin": f"Bearer {self.server.admin_key}",
            "wrong": "Bearer shk_wrong",
            "basic": "Basic eDp5",
        }
        h = {"Authorization": schemes[key]} if key in schemes else {}
        if version is not None:
            h["MCP-Protocol-Version"] = version
        if content_type is not None:
            h["Content-Type"] = content_type
        if accept is not None:
            h["Accept"] = accept
        return h

    def delete_session(self, sid: str) -> None:
        h = self.headers(version=LEGACY, content_type=None, accept=ACCEPT)
        r = self.http.delete(self.url, headers={**h, "Mcp-Session-Id": sid})
        assert r.status_code < 500, r.text


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    # Some examples carry no key or a wrong one: the throttle (test_http_edges.py) is set
    # out of the way of the ones after them.
    live = hello_server(
        tmp_path_factory.mktemp("fuzz-mcp"),
        STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS="1000000",
        STEAMHARNESS_THROTTLE_HOLD_SECONDS="0",
    )
    with live.running(), httpx2.Client(timeout=WAIT) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "f", "version": "1"},
            },
        }
        probe = Endpoint(live, http, "")
        h = probe.headers(version=LEGACY, content_type="application/json", accept=ACCEPT)
        opened = http.post(probe.url, json=init, headers=h)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(probe.url, json=note, headers={**h, "Mcp-Session-Id": sid}).status_code == 202
        yield Endpoint(live, http, sid)
        log = live.log()
    assert "Traceback" not in log, log


# --------------------------------------------------------------------------- the property


def is_jsonrpc_answer(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("jsonrpc") == "2.0"
        and "id" in doc
        and (("result" in doc) != ("error" in doc))
        and (
            "result" in doc
            or (
                isinstance(doc["error"], dict)
                and isinstance(doc["error"].get("code"), int)
                and isinstance(doc["error"].get("message"), str)
            )
        )
    )


def sse_messages(text: str) -> list[Any]:
    messages = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
        if data and "".join(data):
            messages.append(json.loads("\n".join(data)))
    return messages


def check_answer(r: httpx2.Response) -> None:
    """The property: a JSON-RPC answer (or an empty 202), never 5xx, never internals."""
    what = f"{r.request.method} {r.status_code} {r.headers.get('content-type')!r}: {r.text[:600]!r}"
    assert r.status_code < 500, what
    assert not LEAKS.search(r.text), what
    if r.status_code == 202 and not r.content:
        return
    content_type = r.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        messages = sse_messages(r.text)
        assert messages, what
        # The stream may carry notifications (progress) before the answer.
        assert all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in messages), what
        assert is_jsonrpc_answer(messages[-1]), what
        return
    assert content_type.startswith("application/json"), what
    doc = r.json()
    answers = doc if isinstance(doc, list) and doc else [doc]
    assert all(is_jsonrpc_answer(a) for a in answers), what


def send(
    endpoint: Endpoint,
    body: str | bytes,
    *,
    version: str | None,
    content_type: str | None,
    accept: str | None,
    extra: dict[str, str] | None = None,
    key: str = "admin",
) -> httpx2.Response:
    h = {
        **endpoint.headers(version=version, content_type=content_type, accept=accept, key=key),
        **(extra or {}),
    }
    r = endpoint.http.post(endpoint.url, content=body, headers=h)
    check_answer(r)
    return r


@FUZZ
@given(
    message=st.one_of(legacy_messages(), legacy_messages(), legacy_messages()),
    content_type=content_types,
    accept=accepts,
)
def test_any_message_in_a_2025_session_is_answered_as_json_rpc(
    endpoint: Endpoint, message: Message, content_type: str | None, accept: str | None
) -> None:
    send(
        endpoint,
        encode(message.tree()),
        version=LEGACY,
        content_type=content_type,
        accept=accept,
        extra={"Mcp-Session-Id": endpoint.session_id},
    )


@FUZZ
@given(
    message=st.one_of(
        legacy_messages(),
        legacy_messages().map(lambda m: Message("initialize", m.id, m.params, duplicate=m.duplicate)),
    ),
    content_type=content_types,
    accept=accepts,
    version=st.sampled_from([LEGACY, LEGACY, "2025-06-18", "2024-11-05", None]),
    key=credentials,
)
def test_any_opening_message_is_answered_as_json_rpc(
    endpoint: Endpoint,
    message: Message,
    content_type: str | None,
    accept: str | None,
    version: str | None,
    key: str,
) -> None:
    r = send(
        endpoint, encode(message.tree()), version=version, content_type=content_type, accept=accept, key=key
    )
    if sid := r.headers.get("mcp-session-id"):
        endpoint.delete_session(sid)  # each opened session gives its place under the cap back


@st.composite
def modern_requests(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    """A 2026-07-28 body (one message, a batch, or any JSON value) and the routing headers
    it names (mostly matching the body, sometimes not)."""
    shape = draw(st.sampled_from(["message", "message", "message", "message", "batch", "value"]))
    headers: dict[str, str] = {}
    if shape == "batch":
        tree: Any = draw(st.lists(modern_messages().map(Message.tree), max_size=3))
    elif shape == "value":
        tree = draw(json_values)
    else:
        message = draw(modern_messages())
        tree = message.tree()
        method = ascii_header(message.method)
        if method is not None and draw(st.integers(0, 5)):
            headers["Mcp-Method"] = method
        name = ascii_header(message.params.get("name") if isinstance(message.params, dict) else None)
        if name is not None and draw(st.integers(0, 5)):
            headers["Mcp-Name"] = name
    if draw(st.integers(0, 7)) == 0:
        headers["Mcp-Method"] = draw(st.sampled_from(METHODS[1:]))
    return encode(tree), headers


@FUZZ
@given(
    request=modern_requests(),
    content_type=content_types,
    accept=accepts,
    version=st.sampled_from([MODERN, MODERN, MODERN, "2099-01-01", "garbage"]),
    key=credentials,
)
def test_any_2026_request_is_answered_as_json_rpc(
    endpoint: Endpoint,
    request: tuple[str, dict[str, str]],
    content_type: str | None,
    accept: str | None,
    version: str,
    key: str,
) -> None:
    body, headers = request
    send(endpoint, body, version=version, content_type=content_type, accept=accept, extra=headers, key=key)


# By name, so a failing example's report stays short.
ODD_BODIES = {
    "empty": b"",
    "open brace": b"{",
    "open bracket": b"[",
    "null": b"null",
    "lone surrogate": b'"\\ud800"',
    "bom": b"\xff\xfe{}",
    "3000 braces": b"{" * 3000,
    "100000 brackets": b"[" * 100000,
    "100000 nested arrays": b"[" * 100000 + b"]" * 100000,
}


@FUZZ
@given(
    body=st.one_of(
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
        st.sampled_from(list(ODD_BODIES)),
    ),
    version=st.sampled_from([LEGACY, MODERN, None]),
    in_session=st.booleans(),
)
def test_bytes_that_are_not_json_are_a_parse_error(
    endpoint: Endpoint, body: bytes | str, version: str | None, in_session: bool
) -> None:
    body = ODD_BODIES[body] if isinstance(body, str) else body
    # A JSON value that is not an envelope is h-edges' at 2025-11-25 (see the module's note).
    assume(version == MODERN or not parses(body))
    extra = {"Mcp-Session-Id": endpoint.session_id} if in_session and version != MODERN else {}
    send(endpoint, body, version=version, content_type="application/json", accept=ACCEPT, extra=extra)


@pytest.mark.parametrize(
    ("method", "version"),
    [
        ("GET", LEGACY),
        ("DELETE", LEGACY),
        ("PUT", LEGACY),
        ("PATCH", MODERN),
        ("GET", MODERN),
        ("OPTIONS", None),
    ],
)
def test_other_http_methods_get_a_json_rpc_error(
    endpoint: Endpoint, method: str, version: str | None
) -> None:
    h = endpoint.headers(version=version, content_type=None, accept="text/html")
    r = endpoint.http.request(method, endpoint.url, headers=h)
    assert 400 <= r.status_code < 500, (method, r.status_code, r.text)
    check_answer(r)


def test_the_sdks_plain_text_refusals_reach_the_client_as_json_rpc_errors(endpoint: Endpoint) -> None:
    ping = encode({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    session = {"Mcp-Session-Id": endpoint.session_id}
    plain = send(endpoint, ping, version=LEGACY, content_type="text/plain", accept=ACCEPT, extra=session)
    unacceptable = send(endpoint, ping, version=MODERN, content_type="application/json", accept="text/html")
    assert plain.status_code == 400
    assert plain.json()["error"] == {"code": -32600, "message": "HTTP 400: Invalid Content-Type header"}
    assert unacceptable.status_code == 406
    assert unacceptable.json()["error"] == {"code": -32600, "message": "HTTP 406: Not Acceptable"}
