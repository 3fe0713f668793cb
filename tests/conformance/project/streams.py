"""Tools of the conformance fixture about SSE streams (SEP-1699, `server-sse-polling`)."""


def test_reconnection(ctx):
    """The suite's reconnection tool: a call whose POST stream carries a priming event
    (with its id and `retry`), then its events, each with an id, and the result; a client
    whose connection drops resumes it with GET and Last-Event-ID (webui/mcp/event_store.py)."""
    ctx.progress(1, 2, "the stream is primed and resumable")
    return {"reconnected": True, "message": "Reconnection test completed"}
