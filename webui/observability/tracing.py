"""OpenTelemetry traces of the runs: off unless the standard `OTEL_*` variables ask for
them, then exported over OTLP/HTTP.

On (`configure_tracing`, at `serve`'s start): `OTEL_TRACES_EXPORTER=otlp`, or an OTLP
endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) given;
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keep it off. The exporter reads the
rest of its `OTEL_EXPORTER_OTLP_*` variables itself, the resource `OTEL_SERVICE_NAME`
(default `steamharness`) and `OTEL_RESOURCE_ATTRIBUTES`.

What leaves the process is cleaned first (`webui.observability.span_export`): no status descriptions and
no exception messages (an error may quote an argument or an answer: a validation error
does), span names and attribute values cut to bounded lengths (a client chooses a tool
name). A client's `traceparent` is followed but cannot switch the server's sampling off
(an unsampled remote parent is still sampled, unless `OTEL_TRACES_SAMPLER` says otherwise),
and a `tracestate` over 512 characters is dropped.

The MCP SDK's own server span of each request (`tools/call <tool>`, continuing the
client's trace from the request's `_meta`, or from a `traceparent` header the gateway
attached) is the parent of the run's spans: `steamharness.run` for the whole run, and in it
`steamharness.preflight`, `steamharness.queue` (waiting for a worker slot),
`steamharness.worker.start`, `steamharness.handler`, one `steamharness.question` per
question (asked to answered) and the child runs' own `steamharness.run`. Attributes name
the run, project, tool, status and question kind, never arguments, answers or secrets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

log = logging.getLogger(__name__)

TRACER = trace.get_tracer("steamharness")
MAX_VALUE_CHARS = 1024


def tracing_requested(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure_tracing(environ: Mapping[str, str] | None = None) -> Any | None:
    """The process's tracer provider with an OTLP/HTTP exporter, when the environment asks
    for traces (else None, and every span is a no-op). Call `shutdown()` on it at exit:
    the spans still queued are sent."""
    env = os.environ if environ is None else environ
    if not tracing_requested(env):
        return None
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter_name != "otlp":
        log.warning(
            "OTEL_TRACES_EXPORTER=%s: only otlp (over HTTP) is supported; tracing is off", exporter_name
        )
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    from webui.observability.span_export import SanitizingExporter

    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "steamharness"}
    # The SDK reads OTEL_TRACES_SAMPLER itself when no sampler is given; without it, a
    # remote parent's "not sampled" flag does not switch this server's traces off.
    sampler = (
        None
        if env.get("OTEL_TRACES_SAMPLER")
        else ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON)
    )
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=sampler,
        span_limits=SpanLimits(
            max_span_attribute_length=MAX_VALUE_CHARS, max_attribute_length=MAX_VALUE_CHARS
        ),
    )
    provider.add_span_processor(BatchSpanProcessor(SanitizingExporter(OTLPSpanExporter())))
    trace.set_tracer_provider(provider)
    return provider


def ids(span: Span) -> dict[str, str] | None:
    """A span's trace and span ids as hex (None when it records nothing: tracing is off,
    and a no-op span only carries its parent's ids)."""
    context = span.get_span_context()
    if not span.is_recording() or not context.is_valid:
        return None
    return {"traceId": format(context.trace_id, "032x"), "spanId": format(context.span_id, "016x")}
