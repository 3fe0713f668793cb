"""Requests only the MCP client can answer: `ctx.sample` (sampling/createMessage) and
`ctx.roots` (roots/list). They are stored like questions (kind "sampling" / "roots", the
request's params in `client_request`), so a run that waits on one holds no slot, survives a
replica, and is answered by whichever MCP channel follows the run: inline on a 2025 session,
in a 2026-07-28 input round, or through tasks/update. No person answers them in the
browser, and a client that did not declare the capability is never sent one."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ValidationError

from webui.errors import InvalidAnswer, ProjectError

# Interaction kind -> the client capability it needs (and the method it is sent as).
CLIENT_KINDS: dict[str, str] = {"sampling": "sampling", "roots": "roots"}
METHODS: dict[str, str] = {"sampling": "sampling/createMessage", "roots": "roots/list"}
# The channel of the decline the server records for a client that did not declare the
# capability (the handler's call raises, naming it).
UNDECLARED_CHANNEL = "mcp-undeclared"
MAX_TOKENS_LIMIT = 1_000_000
MAX_MESSAGES = 100
# A sampling request as JSON, at most: it is stored, and sent on every round and poll.
MAX_REQUEST_CHARS = 1024 * 1024


# The run's timeline entries of a request to the client: when the handler asks, and when the
# answer (or the refusal) comes back (webui.runs.questions writes them; the run page shows them).
ASKED_ENTRY = "client_request"
ANSWERED_ENTRY = "client_answer"
# What an entry keeps of the workflow's and the model's words (characters), of the model's
# name and stop reason, and of the roots: they are shown on a page, so bounded like a log line.
ENTRY_TEXT_CHARS = 1000
ENTRY_NAME_CHARS = 200
ENTRY_MAX_URIS = 20
ENTRY_URI_CHARS = 300
# Control characters (but newline and tab) are shown as U+FFFD, as in a log line sent to a client.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def is_client_request(kind: str) -> bool:
    return kind in CLIENT_KINDS


def sampling_params(args: dict[str, Any]) -> dict[str, Any]:
    """`ctx.sample(...)`'s request as sampling/createMessage params (JSON), or ProjectError."""
    prompt, messages = args.get("prompt"), args.get("messages")
    if messages is None:
        if not isinstance(prompt, str) or not prompt:
            raise ProjectError("ctx.sample(): give a prompt (a non-empty string) or messages")
        messages = [{"role": "user", "content": {"type": "text", "text": prompt}}]
    if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
        raise ProjectError(f"ctx.sample() messages: a list of 1 to {MAX_MESSAGES} messages")
    max_tokens = args.get("max_tokens")
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 0 < max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise ProjectError(f"ctx.sample() max_tokens: an integer from 1 to {MAX_TOKENS_LIMIT}")
    raw: dict[str, Any] = {"messages": messages, "maxTokens": max_tokens}
    if args.get("system") is not None:
        raw["systemPrompt"] = args["system"]
    temperature = args.get("temperature")
    if temperature is not None:
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not math.isfinite(temperature)
        ):
            raise ProjectError("ctx.sample() temperature: a finite number")
        raw["temperature"] = temperature
    try:
        params = types.CreateMessageRequestParams.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)[:5]
        )
        raise ProjectError(f"ctx.sample(): not a valid sampling request: {problems}") from None
    if params.tools or params.tool_choice:
        raise ProjectError("ctx.sample(): tools in a sampling request are not supported")
    request = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    size = len(json.dumps(request, ensure_ascii=False))
    if size > MAX_REQUEST_CHARS:
        raise ProjectError(
            f"ctx.sample(): the request is {size:,} characters as JSON,"
            f" over the {MAX_REQUEST_CHARS:,} it may be"
        )
    return request


def summary(kind: str, request: dict[str, Any]) -> str:
    """What the request is, for the timeline and the conversation page (plain text)."""
    if kind == "roots":
        return "The workflow asks the MCP client for its roots (roots/list)."
    texts = [
        str(m.get("content", {}).get("text", ""))
        for m in request.get("messages", [])
        if isinstance(m, dict) and isinstance(m.get("content"), dict)
    ]
    first = next((t for t in texts if t), "")
    shown = first if len(first) <= 200 else first[:200] + "…"
    return f"The workflow asks the MCP client's model (sampling/createMessage): {shown}"


def input_request(kind: str, request: dict[str, Any]) -> types.CreateMessageRequest | types.ListRootsRequest:
    if kind == "sampling":
        return types.CreateMessageRequest(params=types.CreateMessageRequestParams.model_validate(request))
    return types.ListRootsRequest()


def _result_model(kind: str) -> type[BaseModel]:
    return types.CreateMessageResult if kind == "sampling" else types.ListRootsResult


def client_content(kind: str, content: Any) -> dict[str, Any]:
    """An accepted answer's content: the client's result, checked (InvalidAnswer)."""
    if isinstance(content, BaseModel):
        content = content.model_dump(mode="json", by_alias=True, exclude_none=True)
    try:
        result = _result_model(kind).model_validate(content)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidAnswer(
            f"not a {METHODS[kind]} result: {where + ': ' if where else ''}{first['msg']}"
        ) from None
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    dumped.pop("resultType", None)
    return dumped


def client_response(kind: str, raw: Any) -> tuple[str, dict[str, Any] | None]:
    """An input response (a round's retry, tasks/update, an answer ahead) as (action,
    content): the client's result, or an explicit decline/cancel of the request."""
    if isinstance(raw, BaseModel):
        raw = raw.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(raw, dict) and raw.get("action") in ("decline", "cancel") and len(raw) <= 2:
        return "decline", None  # the client refused: the handler's call raises; the run goes on
    return "accept", client_content(kind, raw)


def _shown(value: Any, limit: int) -> str:
    """Text for an entry: control characters replaced, cut to `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit:,} characters more)"
    return _CONTROL.sub("\ufffd", text)


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (one block, or several at 2025-11-25)."""
    blocks = content if isinstance(content, list) else [content]
    return [b for b in blocks if isinstance(b, dict)]


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]


def asked_entry(kind: str, request: dict[str, Any], interaction_id: str) -> tuple[str, dict[str, Any]]:
    """The timeline entry (text, data) of a request the handler makes of the client: for
    sampling, the prompt's size and its first text (bounded), max tokens, whether there is a
    system prompt; for roots, that they were asked."""
    data: dict[str, Any] = {"request": kind, "interactionId": interaction_id}
    if kind == "roots":
        return "asked the MCP client for its roots (roots/list)", data
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    texts = [t for m in messages for t in _texts(_content_blocks(m.get("content")))]
    first = next((t for t in texts if t), "")
    data.update(
        messages=len(messages),
        promptChars=sum(len(t) for t in texts),
        firstText=_shown(first, ENTRY_TEXT_CHARS),
        maxTokens=request.get("maxTokens"),
        systemPrompt=bool(request.get("systemPrompt")),
    )
    return "asked the MCP client's model (sampling/createMessage)", data


def answered_entry(
    kind: str,
    interaction_id: str,
    *,
    action: str,
    content: Any,
    channel: str | None,
    reason: str | None,
) -> tuple[str, dict[str, Any]]:
    """The timeline entry (text, data) of the client's answer: for sampling, the model, its
    stop reason and reply (bounded); for roots, how many and their URIs (bounded); a refusal,
    or a client that was never sent it, says why."""
    data: dict[str, Any] = {
        "request": kind,
        "interactionId": interaction_id,
        "action": action,
        "channel": channel,
    }
    if action != "accept" or not isinstance(content, dict):
        data["reason"] = reason or f"the MCP client did not answer the {kind} request"
        if channel == UNDECLARED_CHANNEL:
            return f"not sent: the MCP client did not declare {CLIENT_KINDS[kind]}", data
        return f"the MCP client declined the {kind} request", data
    if kind == "roots":
        roots = [r for r in content.get("roots") or [] if isinstance(r, dict)]
        data.update(
            count=len(roots),
            uris=[_shown(r.get("uri", ""), ENTRY_URI_CHARS) for r in roots[:ENTRY_MAX_URIS]],
        )
        return f"the MCP client gave {len(roots)} root{'' if len(roots) == 1 else 's'}", data
    blocks = _content_blocks(content.get("content"))
    reply = "\n".join(_texts(blocks))
    data.update(
        model=_shown(content.get("model", ""), ENTRY_NAME_CHARS),
        stopReason=_shown(content["stopReason"], ENTRY_NAME_CHARS) if content.get("stopReason") else None,
        replyText=_shown(reply, ENTRY_TEXT_CHARS),
        replyChars=len(reply),
        replyTypes=sorted({_shown(b.get("type", ""), 40) for b in blocks})[:5],
    )
    return "the MCP client's model answered", data
