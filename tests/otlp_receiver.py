"""An OTLP/HTTP trace receiver on loopback for the tracing tests: it keeps every span it is
sent (name, ids, parent, tracestate, attributes, status message, events, service), by span
id, and is stopped by the fixture that started it."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.e2e.server import free_port
from tests.helpers import WAIT


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Receiver:
    def __init__(self) -> None:
        self.spans: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    for resource in request.resource_spans:
                        service = {a.key: a.value.string_value for a in resource.resource.attributes}
                        for scope in resource.scope_spans:
                            for span in scope.spans:
                                receiver.spans[span.span_id.hex()] = {
                                    "id": span.span_id.hex(),
                                    "name": span.name,
                                    "trace": span.trace_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "trace_state": span.trace_state,
                                    "attributes": {a.key: _value(a.value) for a in span.attributes},
                                    "status": span.status.message,
                                    "events": [
                                        {e.name: {a.key: _value(a.value) for a in e.attributes}}
                                        for e in span.events
                                    ],
                                    "service": service.get("service.name"),
                                }
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def of_trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(s) for s in self.spans.values() if s["trace"] == trace_id]

    def until(self, trace_id: str, *names: str) -> dict[str, dict[str, Any]]:
        """The spans of `trace_id` by name, once every one of `names` arrived (bounded)."""
        deadline = time.monotonic() + WAIT
        while True:
            found = {s["name"]: s for s in self.of_trace(trace_id)}
            if set(names) <= set(found):
                return found
            assert time.monotonic() < deadline, f"spans of {trace_id}: {sorted(found)}, not all of {names}"
            time.sleep(0.05)

    of = until

    def everything(self) -> str:
        with self.lock:
            return json.dumps(list(self.spans.values()))


@contextlib.contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
