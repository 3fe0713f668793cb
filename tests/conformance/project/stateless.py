"""Conformance fixture tools of the server-stateless scenario (SEP-2575): a tool that
requires the sampling capability (a client that did not declare it gets -32021 before any
run), a question asked on a call's stream (at 2026-07-28 an InputRequiredResult, never a
server-to-client request), and the trigger of a tool-list change (this server advertises no
listChanged, so it notifies nothing and the suite skips the subscription checks)."""

import json

ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Any answer"}},
    "required": ["answer"],
}


def missing_capability(ctx):
    return "This tool ran: the client declared sampling."


def streaming_elicitation(ctx):
    answer = ctx.ask("Streaming elicitation", ANSWER, message="Answer anything to finish the call.")
    return f"Answered: {json.dumps(answer)}"


def trigger_tool_change(ctx):
    return "Nothing changed: the tool list is fixed by the project's package.json."
