"""The JSON-RPC body of an MCP POST, checked before the SDK reads it, for both protocol eras.

The body is read by the strict reader (`webui.strict_json`), as every JSON the server takes
from outside, then its envelope is checked; a refusal is a JSON-RPC error in our own words,
never the parser's or pydantic's internals (input values, links to their docs):
  - -32700 Parse error: not JSON, not UTF-8, nested too deep, or JSON that is ambiguous or
    not JSON at all though well-formed: a key given twice in one object (which value
    counts would depend on the reader, so no value is taken), NaN or Infinity;
  - -32600 Invalid Request: JSON that is not one JSON-RPC message: a batch (an array;
    MCP over Streamable HTTP takes one message per POST), a scalar, a wrong `jsonrpc`,
    an `id` that is not a string or an integer (an object, an array, a fraction, a
    boolean, null), a `method` that is not a string, `params` that are not an object, a
    response without its `result` or `error`.
A message that passes goes to the SDK as it came; the SDK's own checks (methods, their
params, the session) still apply. The SDK parses the body again (on the event loop, in C:
bounded by the MCP body cap, `STEAMHARNESS_MAX_MCP_BODY_BYTES`, and by the strict reader's
limits this check applied first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp_types.jsonrpc import jsonrpc_message_adapter
from pydantic import ValidationError

from webui import strict_json

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


@dataclass(frozen=True)
class Refusal:
    code: int
    message: str
    id: str | int | None = None  # the message's own id, when it had a usable one

    def document(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}}


def _parse_error(why: str) -> Refusal:
    return Refusal(PARSE_ERROR, f"Parse error: {why}")


def _invalid(why: str, ident: str | int | None = None) -> Refusal:
    return Refusal(INVALID_REQUEST, f"Invalid Request: {why}", ident)


def usable_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def check_body(body: bytes) -> Refusal | None:
    """Why this POST body is not one acceptable JSON-RPC message, or None."""
    read = read_body(body)
    return read if isinstance(read, Refusal) else None


def read_body(body: bytes) -> dict[str, Any] | Refusal:
    """The one JSON-RPC message this POST body is, or why it is not acceptable. The whole
    of a body's parsing and checking: the caller runs it off the event loop when large."""
    try:
        doc = strict_json.loads(body)
    except UnicodeDecodeError:
        return _parse_error("the body is not UTF-8 text")
    except json.JSONDecodeError as exc:
        return _parse_error(f"{exc.msg} (line {exc.lineno}, column {exc.colno})")
    except ValueError as exc:  # a duplicate key, NaN, too deep or too many values, a number too long
        return _parse_error(str(exc))
    if isinstance(doc, list):
        return _invalid(
            "JSON-RPC batches are not supported; send one request, notification or response per POST"
        )
    if not isinstance(doc, dict):
        return _invalid("the body must be one JSON-RPC message (an object)")
    refusal = check_message(doc)
    return doc if refusal is None else refusal


def check_message(doc: dict[str, Any]) -> Refusal | None:
    has_id = "id" in doc
    if has_id and not usable_id(doc["id"]):
        return _invalid('"id" must be a string or an integer')
    ident = doc["id"] if has_id else None
    if doc.get("jsonrpc") != "2.0":
        return _invalid('"jsonrpc" must be "2.0"', ident)
    if "method" in doc:
        if not isinstance(doc["method"], str):
            return _invalid('"method" must be a string', ident)
        if doc.get("params") is not None and not isinstance(doc["params"], dict):
            return _invalid('"params" must be an object', ident)
        if "result" in doc or "error" in doc:
            return _invalid("a request or notification has no result or error", ident)
    elif "result" in doc or "error" in doc:
        if not has_id:
            return _invalid('a response needs the "id" of the request it answers')
        if ("result" in doc) == ("error" in doc):
            return _invalid("a response has a result or an error, not both", ident)
        if "result" in doc and not isinstance(doc["result"], dict):
            return _invalid('"result" must be an object', ident)
        error = doc.get("error", {})
        code = error.get("code") if isinstance(error, dict) else None
        if "error" in doc and not (
            isinstance(code, int) and not isinstance(code, bool) and isinstance(error.get("message"), str)
        ):
            return _invalid('"error" must be an object with an integer code and a message', ident)
    else:
        return _invalid("a message needs a method (a request or notification), or a result or error", ident)
    try:
        jsonrpc_message_adapter.validate_python(doc, by_name=False)
    except ValidationError:  # whatever is left: said plainly, pydantic's text stays here
        return _invalid("not a JSON-RPC request, notification or response", ident)
    return None
