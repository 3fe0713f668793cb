"""The docs' examples against a live server: the projects under docs/examples/ are served and
called as the guide calls them (the Python SDK client of Getting started, with its question
and its file), every MCP method the server serves has its Server API page, and each page's
example request and response is what this server answers now.

The examples are recorded here, one exchange per method (a few more under their method's),
with ids, keys and times replaced by placeholders, and compared with
`docs/_fixtures/mcp_examples.json` (the generator reads it). `scripts/docs` re-records them
(`STEAMHARNESS_DOCS_RECORD=1`) and regenerates the pages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from docs import generate
from tests.docs import test_readme
from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT
from webui.mcp.operations import served_methods

DOCS = Path(generate.__file__).resolve().parent
FIRST = "5d6f2c1a-3b4e-4f70-9a8b-1c2d3e4f5a6b"
REVIEW = "8e1a4b2c-7d3f-4a59-b6c0-2d4e6f8a0b1c"
GREETER = "3f2b8c1d-6a4e-4d7b-9e0f-7a1c5b3d2e90"  # the README's project
HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
RECORD = os.environ.get("STEAMHARNESS_DOCS_RECORD") == "1"
POLL = 0.05


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("docs")) as server:
        server.add_project(DOCS / "examples/first-project", FIRST)
        server.add_project(DOCS / "examples/review", REVIEW)
        server.add_project(DOCS / "examples/readme", GREETER)
        yield server


@pytest.fixture(scope="module")
def key(live: LiveServer) -> str:
    return live.create_key("ada")


def test_the_python_sdk_example_answers_the_question_and_passes_the_file(
    live: LiveServer, key: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("one two three\nfour\n")
    done = subprocess.run(
        [sys.executable, str(DOCS / "examples/call_first_project.py"), live.base_url, FIRST, key, str(notes)],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "asked: How should I greet?"
    assert "'greeting': 'Good day, Ada!'" in lines[1]
    assert "'file': 'notes.txt'" in lines[2] and "'words': 4" in lines[2]


def test_the_readmes_python_sdk_example_as_written_answers_the_question(
    live: LiveServer, key: str, tmp_path: Path
) -> None:
    example = test_readme.blocks("python")[1]
    script = example.replace("http://127.0.0.1:8000", live.base_url).replace("<YOUR_API_KEY>", key)
    assert script != example
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'greeting': 'Good day, Ada!'}"


def test_every_method_a_live_server_serves_has_its_page(live: LiveServer) -> None:
    doc = httpx2.get(f"{live.base_url}/openapi.json", timeout=WAIT).json()
    served = {item["x-mcp-method"] for item in doc["paths"].values() if "x-mcp-method" in item}
    assert {"initialize", "tools/call", "tasks/get", "notifications/cancelled"} <= served
    pages = {p.stem for p in (DOCS / "server-api").glob("*.md")}
    missing = {m for m in served if generate.method_slug(m) not in pages}
    assert not missing, f"served methods without a Server API page (run scripts/docs): {sorted(missing)}"
    # The generator reads the same server the app builds: the same methods, no more.
    generated = {m.method for m in served_methods(generate.served_server())}
    assert generated == served


# --------------------------------------------------------------------------- recording


class Recorder:
    """Plain JSON-RPC over HTTP, as a client sends it, each exchange kept for its method."""

    def __init__(self, live: LiveServer, key: str) -> None:
        self.live = live
        self.key = key
        self.next_id = 0
        self.sid: str | None = None
        self.examples: dict[str, Any] = {}

    def post(
        self,
        era: str,
        method: str,
        params: dict[str, Any],
        *,
        project: str = FIRST,
        notification: bool = False,
        capabilities: dict[str, Any] | None = None,
        name: str | None = None,
        keep: bool = True,
        title: str | None = None,
    ) -> tuple[httpx2.Response, dict[str, Any] | None]:
        """`keep`: the method's example; `title`: one more exchange of the method, under it."""
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if era == MODERN:
            headers |= {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
            if name is not None:
                headers["Mcp-Name"] = name
            params = {
                **params,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientInfo": {"name": "docs-example", "version": "1.0.0"},
                    "io.modelcontextprotocol/clientCapabilities": capabilities or {},
                },
            }
        elif method != "initialize":
            assert self.sid is not None
            headers |= {"MCP-Protocol-Version": HANDSHAKE, "Mcp-Session-Id": self.sid}
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notification:
            self.next_id += 1
            body = {"jsonrpc": "2.0", "id": self.next_id, **body}
        url = self.live.mcp_url(project)
        r = httpx2.post(url, json=body, headers=headers, timeout=WAIT)
        reply = None if notification else _reply(r, self.next_id)
        if keep or title is not None:
            shown = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "mcp-session-id")}
            exchange = {
                "era": era,
                "request": {"path": url.removeprefix(self.live.base_url), "headers": headers, "body": body},
                "response": {"status": r.status_code, "headers": shown, "body": reply},
            }
            if title is not None:
                self.examples[method].setdefault("more", []).append({"title": title, **exchange})
            else:
                self.examples[method] = exchange
        return r, reply


def _reply(r: httpx2.Response, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response in a JSON or SSE answer (past any notifications before it)."""
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    for line in r.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if message.get("id") == request_id and "method" not in message:
                return message
    raise AssertionError(f"no reply to {request_id}: {r.status_code} {r.text!r}")


def _until(rec: Recorder, task_id: str, status: str) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        _, reply = rec.post(
            MODERN,
            "tasks/get",
            {"taskId": task_id},
            project=REVIEW,
            name=task_id,
            keep=False,
            capabilities=TASK_CAPS,
        )
        assert reply is not None and "result" in reply, reply
        if reply["result"]["status"] == status:
            return
        assert time.monotonic() < deadline, f"task still {reply['result']['status']}, not {status}"
        time.sleep(POLL)


TASK_CAPS = {"elicitation": {"form": {}}, "extensions": {TASKS: {}}}


def record(live: LiveServer, key: str) -> dict[str, Any]:
    rec = Recorder(live, key)
    info = {"name": "docs-example", "version": "1.0.0"}
    opened, _ = rec.post(
        HANDSHAKE, "initialize", {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": info}
    )
    rec.sid = opened.headers["mcp-session-id"]
    rec.post(HANDSHAKE, "notifications/initialized", {}, notification=True)
    rec.post(HANDSHAKE, "ping", {})
    rec.post(HANDSHAKE, "logging/setLevel", {"level": "info"})
    rec.post(
        HANDSHAKE,
        "notifications/cancelled",
        {"requestId": 99, "reason": "no longer needed"},
        notification=True,
    )

    rec.post(MODERN, "server/discover", {})
    rec.post(MODERN, "tools/list", {})
    rec.post(
        MODERN,
        "tools/call",
        {"name": "greet", "arguments": {"name": "Ada"}},
        name="greet",
        capabilities={"elicitation": {"form": {}}},
    )
    rec.post(MODERN, "prompts/list", {})
    rec.post(MODERN, "prompts/get", {"name": "summary"}, name="summary")
    rec.post(MODERN, "resources/list", {})
    rec.post(MODERN, "resources/read", {"uri": "file:///notes.txt"}, name="file:///notes.txt")
    rec.post(MODERN, "resources/templates/list", {})
    rec.post(
        MODERN,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "summary"}, "argument": {"name": "topic", "value": "mc"}},
    )

    # A tool whose calls are tasks: its question is asked through tasks/get, answered with
    # tasks/update; another call is cancelled.
    _, created = rec.post(
        MODERN,
        "tools/call",
        {"name": "review", "arguments": {"change": "PR 42"}},
        project=REVIEW,
        name="review",
        capabilities=TASK_CAPS,
        keep=False,
    )
    assert created is not None and created["result"]["resultType"] == "task", created
    task_id = created["result"]["taskId"]
    _until(rec, task_id, "input_required")
    rec.post(MODERN, "tasks/get", {"taskId": task_id}, project=REVIEW, name=task_id, capabilities=TASK_CAPS)
    answer = {"merge": {"action": "accept", "content": {}}}
    rec.post(
        MODERN,
        "tasks/update",
        {"taskId": task_id, "inputResponses": answer},
        project=REVIEW,
        name=task_id,
        capabilities=TASK_CAPS,
    )
    _until(rec, task_id, "completed")
    _, other = rec.post(
        MODERN,
        "tools/call",
        {"name": "review", "arguments": {"change": "PR 43"}},
        project=REVIEW,
        name="review",
        capabilities=TASK_CAPS,
        keep=False,
    )
    assert other is not None
    other_id = other["result"]["taskId"]
    rec.post(
        MODERN, "tasks/cancel", {"taskId": other_id}, project=REVIEW, name=other_id, capabilities=TASK_CAPS
    )
    _, refused = rec.post(
        MODERN,
        "tools/call",
        {"name": "greet", "arguments": {"name": 42}},
        name="greet",
        title="Arguments that fail the tool's input schema: a tool error the model reads and"
        " corrects its call by (SEP-1303), not a JSON-RPC error; no run is started.",
    )
    assert refused is not None and refused["result"]["isError"] is True, refused
    rec.examples["tools/call"]["note"] = (
        "The handler asked a question: a 2026-07-28 client answers it and retries the call with "
        "`inputResponses` and the `requestState` (a 2025-11-25 session is sent `elicitation/create` "
        "on the call's stream instead)."
    )
    return normalize(rec.examples, key, live.base_url)


# Values that differ on every run, each replaced by a placeholder numbered in order of
# appearance (the same value, the same placeholder).
VOLATILE = [
    (
        re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"),
        "2026-01-01T00:00:00Z",
        False,
    ),
    (re.compile(r"\b\d{8}-[0-9a-f]{12}\.[A-Za-z0-9_-]+"), "<task id {n}>", True),
    (re.compile(r"\b\d{8}-[0-9a-f]{12}\b"), "<run id {n}>", True),
    (re.compile(r"\bint_[A-Za-z0-9]+"), "<question id {n}>", True),
    (re.compile(r"\bwf_[A-Za-z0-9]+"), "<file id {n}>", True),
]


EXAMPLE_URL = "http://127.0.0.1:8000"


def normalize(examples: dict[str, Any], key: str, base_url: str) -> dict[str, Any]:
    text = json.dumps(examples, sort_keys=True).replace(key, "<API key>").replace(base_url, EXAMPLE_URL)
    for pattern, placeholder, numbered in VOLATILE:
        seen: dict[str, str] = {}

        def swap(match: re.Match[str], seen: dict[str, str] = seen, placeholder: str = placeholder) -> str:
            value = match.group(0)
            if value not in seen:
                seen[value] = placeholder.format(n=len(seen) + 1)
            return seen[value]

        text = pattern.sub(swap, text) if numbered else pattern.sub(placeholder, text)
    data = json.loads(text)
    for example in [e for method in data.values() for e in (method, *method.get("more", []))]:
        for part in (example["request"]["headers"], example["response"]["headers"]):
            for header in list(part):
                if header.lower() == "mcp-session-id":
                    part[header] = "<session id>"
        _blank(example["response"]["body"])
    return data


def _blank(node: Any) -> None:
    """Sealed or signed values: a request state, a server version that moves with releases."""
    if isinstance(node, dict):
        for k in list(node):
            if k == "requestState" and isinstance(node[k], str):
                node[k] = "<sealed request state>"
            else:
                _blank(node[k])
    elif isinstance(node, list):
        for item in node:
            _blank(item)


def test_the_server_api_examples_are_what_this_server_answers(live: LiveServer, key: str) -> None:
    examples = record(live, key)
    assert set(examples) == {m.method for m in served_methods(generate.served_server())}, (
        "a served method has no recorded example"
    )
    if RECORD:
        generate.EXAMPLES_FIXTURE.parent.mkdir(exist_ok=True)
        generate.EXAMPLES_FIXTURE.write_text(json.dumps(examples, indent=2, sort_keys=True) + "\n")
        return
    kept = json.loads(generate.EXAMPLES_FIXTURE.read_text())
    assert kept == examples, "the Server API examples are stale: run scripts/docs"
