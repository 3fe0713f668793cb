"""The worker protocol in one listing: every message between the run service, the zygote and
a run's worker process, and the limits on them.

Standard library only (the zygote preloads it with the worker runtime). Every message is one
line of JSON (`encode`) with a `type`; the `TypedDict`s below name each message's fields.

Zygote (`webui.runs.zygote`), over its stdin and stdout:
  pool -> zygote   `ForkCommand`            fork one fresh worker that says hello with `token`
  zygote -> pool   `ZygoteReady`, `Forked`, `WorkerExited`

Worker (`webui.runs.child`), over the Unix socket of the pool (`webui.runs.pool`):
  worker -> server `Hello` (once, as a spare), then, once it has its run: `Output`, `Log`,
                   `Progress`, `RpcRequest` (each blocks its handler thread until its
                   `Reply`), and one outcome: `Done`, `Failed` or `Error`
  server -> worker `Start` (the run: `RunSpec`), `Reply`

RPC operations (`RpcRequest.op`): `RPC_OPS`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal, NotRequired, TypedDict

READ_CHUNK = 65536
# The run service reads at most this much per message (one JSON line).
MAX_FRAME_BYTES = 16 * 1024 * 1024
# In characters; with JSON escaping even the worst text stays far below the frame limit.
LOG_TEXT_LIMIT = 1024 * 1024
# A progress message as stored and sent: cut by the run service once the run's secrets are
# redacted from the whole of it (the worker bounds it at LOG_TEXT_LIMIT only, so a secret the
# worker's cut would split is never left half in what is kept).
PROGRESS_MESSAGE_LIMIT = 4096
# The levels of a `ctx.log` line, severity ascending: RFC 5424's, as MCP's
# `notifications/message` names them (webui.mcp.logs checks they are the SDK's).
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
DEFAULT_LOG_LEVEL = "info"

# ask/approve: a question to a person, sample/roots: a request to the MCP client, together:
# a round of those (the run waits); related.run: a child run; the others
# are answered at once from the project's stores (related.*.get: a related project's, read-only).
RPC_OPS = (
    "ask",
    "approve",
    "sample",
    "roots",
    "together",
    "related.run",
    "files.create",
    "kv.get",
    "kv.set",
    "kv.delete",
    "values.get",
    "values.set",
    "values.delete",
    "related.kv.get",
    "related.values.get",
)


class MessageTooLarge(ValueError):
    """A message would be larger than MAX_FRAME_BYTES."""


# ----------------------------------------------------------------- zygote
class ForkCommand(TypedDict):
    token: str


class ZygoteReady(TypedDict):
    type: Literal["ready"]
    pid: int


class Forked(TypedDict):
    type: Literal["forked"]
    token: str
    pid: int


class WorkerExited(TypedDict):
    type: Literal["exit"]
    pid: int
    code: int | None
    signal: int | None


# ----------------------------------------------------------------- server -> worker
class WorkerUserSpec(TypedDict):
    name: str
    uid: int
    gid: int


class RunSpec(TypedDict):
    """What a worker is told to run (`Start.spec`)."""

    runId: str
    entrypointId: str
    params: dict[str, Any]  # files as {"$file": {...}} markers
    root: str  # the project folder
    handler: str  # "file.py:function"
    # Where ctx.files.create stages files (None: the worker's scratch directory).
    fileCreateDir: str | None
    env: dict[str, str]
    related: dict[str, str]  # alias -> folder (stdio only)
    relatedIds: dict[str, str]  # alias -> project id
    config: dict[str, Any]
    # Added by the pool as it hands the run to a worker.
    scratch: NotRequired[str]
    user: NotRequired[WorkerUserSpec | None]


class Start(TypedDict):
    type: Literal["start"]
    spec: RunSpec


class Reply(TypedDict):
    type: Literal["reply"]
    id: int
    ok: bool
    result: NotRequired[Any]
    error: NotRequired[str]


# ----------------------------------------------------------------- worker -> server
class Hello(TypedDict):
    type: Literal["hello"]
    token: str
    pid: int


class Output(TypedDict):
    type: Literal["output"]
    stream: Literal["stdout", "stderr"]
    text: str


class Log(TypedDict):
    type: Literal["log"]
    text: str
    level: NotRequired[str]  # one of LOG_LEVELS; absent: DEFAULT_LOG_LEVEL


class Progress(TypedDict):
    type: Literal["progress"]
    done: float
    total: float | None
    message: str | None


class RpcRequest(TypedDict):
    type: Literal["rpc"]
    id: int
    op: str  # one of RPC_OPS
    args: dict[str, Any]


class Done(TypedDict):
    type: Literal["done"]
    output: Any


class Failed(TypedDict):
    """ctx.fail(err_code, message): the workflow's own failure."""

    type: Literal["failed"]
    errCode: int | str
    message: str


class Error(TypedDict):
    """The handler raised, could not be prepared or sent too much (`code`: output_too_large)."""

    type: Literal["error"]
    message: str
    code: NotRequired[Literal["output_too_large"]]


def reply(rid: int, *, result: Any = None, error: str | None = None) -> Reply:
    """The answer to one `RpcRequest`: its result, or the error its handler raises."""
    if error is not None:
        return {"type": "reply", "id": rid, "ok": False, "error": error}
    return {"type": "reply", "id": rid, "ok": True, "result": result}


def encode(msg: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """One message as its wire line (`default`: JSON for the values json cannot take)."""
    # allow_nan=False: NaN/Infinity are not JSON; the handler's call fails here instead.
    return (json.dumps(msg, separators=(",", ":"), default=default, allow_nan=False) + "\n").encode()


def mb(size: int) -> str:
    """A message size, for a person."""
    return f"{size / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")


def cut_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return text[:limit] + cut_note(len(text) - limit)


def cut_note(more: int) -> str:
    """What ends a text cut short by `more` characters."""
    return f"… [cut: {more} more characters]"
