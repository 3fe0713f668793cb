"""What leaves the process when tracing is on: the spans without what may quote a
person's or a client's input. Imported only by `configure_tracing` (the SDK is not loaded
when tracing is off)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, Status

MAX_NAME_CHARS = 256
MAX_TRACESTATE_CHARS = 512


class SanitizingExporter(SpanExporter):
    """Hands `inner` the spans without what may quote a person's or a client's input: status
    descriptions and exception messages are dropped (the status code, `error.type` and the
    exception's type stay), names are cut to MAX_NAME_CHARS, a tracestate over
    MAX_TRACESTATE_CHARS (from a header or a request's `_meta`) is dropped."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([clean(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def clean(span: ReadableSpan) -> ReadableSpan:
    status = span.status
    exceptions = any(event.name == "exception" for event in span.events)
    context = span.context
    state = context.trace_state if context is not None else None
    big_state = state is not None and len(state.to_header()) > MAX_TRACESTATE_CHARS
    if not (status.description or exceptions or big_state or len(span.name) > MAX_NAME_CHARS):
        return span
    if big_state and context is not None:
        context = SpanContext(context.trace_id, context.span_id, context.is_remote, context.trace_flags)
    events = [
        Event(
            "exception",
            {"exception.type": str((event.attributes or {}).get("exception.type", ""))[:MAX_NAME_CHARS]},
            event.timestamp,
        )
        if event.name == "exception"
        else event
        for event in span.events
    ]
    return ReadableSpan(
        name=span.name[:MAX_NAME_CHARS],
        context=context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=Status(status.status_code),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
