"""`STEAMHARNESS_LOG_FORMAT=json` on a real `steamharness serve`: every line the server
logs (uvicorn's own included) is one JSON object with time, level, logger and event, and a
credential in a logged request is redacted exactly as in the text format; the run, MCP
session and trace a line is about are added (the formatter, in this process)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider

from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT
from webui.edge.access_log import RedactCredentials, Redactor
from webui.mcp.binding import Binding, current_binding
from webui.observability.log_context import current_run_id
from webui.web.logging import JsonFormatter


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("json-logs"), STEAMHARNESS_LOG_FORMAT="json") as live:
        yield live


def _lines(server: LiveServer) -> list[str]:
    return [line for line in server.log().splitlines() if line.strip()]


def test_every_line_is_a_json_object_and_credentials_stay_redacted(server: LiveServer) -> None:
    secret = "shk_abcdef123456_" + "s" * 40
    r = httpx2.get(f"{server.base_url}/metrics?api_key={secret}", timeout=WAIT)
    assert r.status_code in (401, 404)
    deadline = time.monotonic() + WAIT
    while not any("/metrics" in line for line in _lines(server)):
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.05)
    lines = _lines(server)
    parsed: list[dict[str, Any]] = []
    for line in lines:
        if line.startswith("steamharness: replica") or line.startswith("demo "):
            continue  # the CLI's own start-up lines, before logging is configured
        doc = json.loads(line)
        assert {"time", "level", "logger", "event"} <= doc.keys(), doc
        parsed.append(doc)
    access = [d for d in parsed if "/metrics" in d["event"]]
    assert access and access[0]["logger"] == "uvicorn.access"
    assert secret not in server.log() and "s" * 40 not in server.log()
    assert "[redacted]" in access[0]["event"]


def _format(record: logging.LogRecord) -> dict[str, Any]:
    RedactCredentials(Redactor(["the-admin-key-0123456789abcdef"])).filter(record)
    return json.loads(JsonFormatter().format(record))


def test_a_line_names_its_run_session_and_trace_and_its_exception_redacted() -> None:
    try:
        raise RuntimeError("failed with shk_0123456789ab_secretsecretsecret")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "webui.runs.service",
        logging.WARNING,
        __file__,
        1,
        "run %s: %s",
        ("r-1", "the-admin-key-0123456789abcdef"),
        exc_info,
    )
    run_token = current_run_id.set("20261204-abcdef")
    binding_token = current_binding.set(cast(Binding, SimpleNamespace(session_id="0123456789abcdef" * 2)))
    tracer = TracerProvider().get_tracer("test")
    try:
        with tracer.start_as_current_span("tools/call") as span:
            doc = _format(record)
            context = span.get_span_context()
    finally:
        current_binding.reset(binding_token)
        current_run_id.reset(run_token)
    assert doc["level"] == "warning" and doc["logger"] == "webui.runs.service"
    assert doc["event"] == "run r-1: [redacted]"
    assert doc["run_id"] == "20261204-abcdef"
    assert doc["session_id"] == "01234567…"
    assert doc["trace_id"] == format(context.trace_id, "032x")
    assert doc["span_id"] == format(context.span_id, "016x")
    assert "RuntimeError" in doc["exception"] and "secretsecret" not in doc["exception"]


def test_a_line_outside_any_run_session_or_trace_has_none_of_them() -> None:
    doc = _format(logging.LogRecord("x", logging.INFO, __file__, 1, "plain", (), None))
    assert doc["event"] == "plain" and not {"run_id", "session_id", "trace_id", "span_id"} & doc.keys()
