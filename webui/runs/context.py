"""The `ctx` a workflow handler sees, in its worker process: questions, approvals, logs and
progress, the project's stores, files, related projects and the run's configuration.

Standard library only, like the rest of the worker side (webui.runs.child). Every blocking
call is an `rpc` over the run's `Channel` (webui.runs.messages lists them), answered by the
run service.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import os
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from webui.runs.context_questions import (
    QuestionRound,
    approve_args,
    approve_result,
    ask_args,
    ask_result,
    roots_args,
    roots_result,
    sample_args,
    sample_result,
)
from webui.runs.messages import (
    DEFAULT_LOG_LEVEL,
    LOG_LEVELS,
    LOG_TEXT_LIMIT,
    MAX_FRAME_BYTES,
    READ_CHUNK,
    MessageTooLarge,
    cut_text,
    encode,
    mb,
)


class WorkflowFailure(Exception):
    """Raised by `ctx.fail`: the run ends with a business `errCode`."""

    def __init__(self, err_code: int | str, message: str) -> None:
        super().__init__(message)
        self.err_code = err_code
        self.message = message


class RelatedProjectError(RuntimeError):
    """`ctx.related` refused: an alias the project does not declare, a relation not
    confirmed by both projects, an unknown entrypoint, bad params, no permission, or a
    related project that is missing or offline. The message says which."""


class UnknownRelatedProject(RelatedProjectError, KeyError):
    """`ctx.related[alias]` with an alias the project does not declare."""

    def __str__(self) -> str:
        return str(self.args[0])


class RelatedRunFailed(RuntimeError):
    """A child run started through `ctx.related[alias].run(...)` did not succeed."""

    def __init__(self, run_id: str, status: str, error: dict[str, Any] | None) -> None:
        error = error or {}
        self.run_id = run_id
        self.status = status
        self.error = error
        detail = f"{error.get('code')}: {error.get('message')}" if error else status
        if error.get("errCode") is not None:
            detail += f" (errCode {error['errCode']})"
        super().__init__(f"child run {run_id} ended {status}: {detail}")


class ManagedFile:
    """A file param or a created output, as the handler sees it."""

    def __init__(self, *, id: str, path: str, name: str, mime_type: str, size: int) -> None:
        self.id = id
        self.path = Path(path)
        self.name = name
        self.mime_type = mime_type
        self.size = size

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.path.read_text(encoding=encoding)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "mimeType": self.mime_type, "size": self.size}

    def __repr__(self) -> str:
        return f"ManagedFile(id={self.id!r}, name={self.name!r}, size={self.size})"


class Channel:
    """Framed JSON both ways; replies are matched to the blocked caller by id."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._started = threading.Event()
        self._start: dict[str, Any] | None = None

    def send(self, msg: dict[str, Any]) -> None:
        self.send_frame(frame(msg))

    def send_frame(self, data: bytes) -> None:
        if len(data) > MAX_FRAME_BYTES:
            raise MessageTooLarge(f"the message is {mb(len(data))}, over the {mb(MAX_FRAME_BYTES)} limit")
        with self._send_lock:
            self._sock.sendall(data)

    def rpc(self, op: str, **args: Any) -> Any:
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        data = frame({"type": "rpc", "id": rid, "op": op, "args": args})
        if len(data) > MAX_FRAME_BYTES:
            raise MessageTooLarge(
                f"ctx {op}: the request is {mb(len(data))} as JSON, over the"
                f" {mb(MAX_FRAME_BYTES)} a message to the server may be"
            )
        self.send_frame(data)
        with self._cond:
            while rid not in self._replies:
                self._cond.wait()
            reply = self._replies.pop(rid)
        if not reply.get("ok"):
            raise RuntimeError(reply.get("error") or f"{op} failed")
        return reply.get("result")

    def wait_start(self) -> dict[str, Any]:
        """Block until the run service hands this (fresh, idle) worker its run."""
        self._started.wait()
        assert self._start is not None
        return self._start

    def read_forever(self) -> None:
        """Deliver replies; when the run service goes away, take the whole run down."""
        buf = b""
        try:
            while True:
                chunk = self._sock.recv(READ_CHUNK)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    if msg.get("type") == "start":
                        self._start = msg["spec"]
                        self._started.set()
                    elif msg.get("type") == "reply":
                        with self._cond:
                            self._replies[int(msg["id"])] = msg
                            self._cond.notify_all()
        except OSError:
            pass
        # No parent, no run: a worker never outlives the process that drives it.
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(70)


def _json_default(value: Any) -> Any:
    if isinstance(value, ManagedFile):
        return value.to_json()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Store:
    def __init__(self, chan: Channel, name: str) -> None:
        self._chan = chan
        self._name = name

    def get(self, key: str, default: Any = None) -> Any:
        found = self._chan.rpc(f"{self._name}.get", key=str(key))
        return found["value"] if found["found"] else default

    def set(self, key: str, value: Any) -> None:
        self._chan.rpc(f"{self._name}.set", key=str(key), value=value)

    def delete(self, key: str) -> bool:
        return bool(self._chan.rpc(f"{self._name}.delete", key=str(key)))


class Knowledge:
    """`ctx.knowledge`: the project's knowledge base. `search` returns the best chunks, each
    with its document id, title, metadata, a snippet and the positions of the matching words;
    `get` a document with its text (None when there is none). `add` and `remove` need the
    entrypoint's `"knowledge": "write"`."""

    def __init__(self, chan: Channel, prefix: str = "knowledge", alias: str | None = None) -> None:
        self._chan = chan
        self._prefix = prefix
        self._alias = alias

    def _rpc(self, verb: str, **args: Any) -> Any:
        if self._alias is None:
            return self._chan.rpc(f"{self._prefix}.{verb}", **args)
        return _related_rpc(self._chan, f"{self._prefix}.{verb}", alias=self._alias, **args)

    def search(
        self,
        query: str,
        *,
        collection: str | list[str] | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        mode: str = "auto",
    ) -> list[dict[str, Any]]:
        found = self._rpc("search", query=query, collection=collection, filter=filter, limit=limit, mode=mode)
        return list(found["hits"])

    def get(self, id: str) -> dict[str, Any] | None:
        return self._rpc("get", id=id)

    def add(
        self,
        collection: str,
        text: str,
        *,
        id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if self._alias is not None:
            raise RelatedProjectError(
                f"related project {self._alias!r}: its knowledge base is read-only here"
            )
        return self._rpc("add", collection=collection, text=text, id=id, title=title, metadata=metadata)

    def remove(self, id: str) -> bool:
        if self._alias is not None:
            raise RelatedProjectError(
                f"related project {self._alias!r}: its knowledge base is read-only here"
            )
        return bool(self._rpc("remove", id=id))


def _related_rpc(chan: Channel, op: str, **args: Any) -> Any:
    try:
        return chan.rpc(op, **args)
    except MessageTooLarge:
        raise
    except RuntimeError as exc:
        raise RelatedProjectError(str(exc)) from None


class _RelatedStore:
    """A related project's KV store or values, read-only."""

    def __init__(self, chan: Channel, alias: str, name: str) -> None:
        self._chan = chan
        self._alias = alias
        self._name = name

    def get(self, key: str, default: Any = None) -> Any:
        found = _related_rpc(self._chan, f"related.{self._name}.get", alias=self._alias, key=str(key))
        return found["value"] if found["found"] else default

    def set(self, key: str, value: Any) -> None:
        raise RelatedProjectError(f"related project {self._alias!r}: its {self._name} are read-only here")

    def delete(self, key: str) -> bool:
        raise RelatedProjectError(f"related project {self._alias!r}: its {self._name} are read-only here")


class RelatedProject:
    """`ctx.related[alias]`: another project this one may call (both name each other)."""

    def __init__(self, chan: Channel, alias: str, project_id: str, path: str | None) -> None:
        self._chan = chan
        self.alias = alias
        self.id = project_id
        self.path = Path(path) if path else None  # its folder, over stdio only
        self.kv = _RelatedStore(chan, alias, "kv")
        self.values = _RelatedStore(chan, alias, "values")
        self.knowledge = Knowledge(chan, "related.knowledge", alias)

    def run(self, entrypoint_id: str, /, **params: Any) -> Any:
        """Run one of its entrypoints as a child run and wait for it; its questions reach
        the same person. Returns the output; raises RelatedRunFailed if it did not succeed."""
        result = _related_rpc(
            self._chan, "related.run", alias=self.alias, entrypoint=str(entrypoint_id), params=params
        )
        if result["status"] != "success":
            raise RelatedRunFailed(str(result["runId"]), str(result["status"]), result.get("error"))
        return result["output"]

    def __repr__(self) -> str:
        return f"RelatedProject(alias={self.alias!r}, id={self.id!r})"


class _Related(Mapping[str, RelatedProject]):
    def __init__(self, chan: Channel, ids: dict[str, str], paths: dict[str, str]) -> None:
        self._projects = {
            alias: RelatedProject(chan, alias, pid, paths.get(alias)) for alias, pid in ids.items()
        }

    def __getitem__(self, alias: str) -> RelatedProject:
        found = self._projects.get(alias)
        if found is None:
            known = ", ".join(repr(a) for a in self._projects) or "none"
            raise UnknownRelatedProject(
                f"related project {alias!r} is not declared in this project's relatedProjects"
                f" (declared: {known})"
            )
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._projects)

    def __len__(self) -> int:
        return len(self._projects)


class _Files:
    def __init__(self, chan: Channel, create_dir: str) -> None:
        self._chan = chan
        self._create_dir = create_dir

    def create(self, name: str, data: bytes | str, mime_type: str | None = None) -> ManagedFile:
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        Path(self._create_dir).mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".create-", dir=self._create_dir)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        mime = mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        meta = self._chan.rpc("files.create", name=str(name), tmp_path=tmp, mime_type=mime)
        return ManagedFile(**meta)


class Context:
    """What `run(ctx)` receives. Blocking calls wait for the run service's reply."""

    def __init__(self, chan: Channel, spec: dict[str, Any]) -> None:
        self._chan = chan
        self.run_id: str = spec["runId"]
        self.entrypoint_id: str = spec["entrypointId"]
        self.params: dict[str, Any] = _materialise(spec.get("params") or {})
        self.kv = _Store(chan, "kv")
        self.values = _Store(chan, "values")
        self.knowledge = Knowledge(chan)
        self.files = _Files(chan, spec["fileCreateDir"])
        self.related: Mapping[str, RelatedProject] = _Related(
            chan, dict(spec.get("relatedIds") or {}), dict(spec.get("related") or {})
        )
        # The configuration the run started with (every declared field; read-only).
        self.config: Mapping[str, Any] = MappingProxyType(dict(spec.get("config") or {}))

    def ask(
        self,
        title: str,
        fields: list[dict[str, Any]] | dict[str, Any],
        message: str | None = None,
        *,
        key: str | None = None,
    ) -> dict[str, Any] | None:
        """Ask a person: `fields` is a list of params, or a JSON Schema object (the MCP
        elicitation subset: a flat object of string, number, integer, boolean and
        multi-select array properties). The answer's content, or None if declined.
        `key` (1-64 of A-Z a-z 0-9 _ . -): the name a 2026-07-28 input round gives the
        question (otherwise its id), so a client can answer it ahead, in its first call."""
        return ask_result(self._chan.rpc("ask", **ask_args(title, fields, message, key)))

    def sample(
        self,
        prompt: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        max_tokens: int = 512,
        system: str | None = None,
        temperature: float | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Ask the MCP client's model (sampling/createMessage): `prompt`, or `messages` in
        the protocol's shape. The client's result: {"role", "content", "model",
        "stopReason"}. Raises ClientRequestRefused if the client declined or did not
        declare sampling."""
        args = sample_args(prompt, messages, max_tokens, system, temperature, key)
        return sample_result(self._chan.rpc("sample", **args))

    def roots(self, *, key: str | None = None) -> list[dict[str, Any]]:
        """The MCP client's roots (roots/list): [{"uri", "name"?}]. Raises
        ClientRequestRefused like `sample`."""
        return roots_result(self._chan.rpc("roots", **roots_args(key)))

    def approve(
        self, action: str, message: str | None = None, details: Any = None, *, key: str | None = None
    ) -> bool:
        """Ask a person to approve `action`: True when they do."""
        return approve_result(self._chan.rpc("approve", **approve_args(action, message, details, key)))

    def together(self) -> QuestionRound:
        """Ask several questions at once: `with ctx.together() as round:` then
        `round.ask(...)`, `round.approve(...)`, `round.sample(...)`, `round.roots(...)`
        (the same arguments; at most 16, each key once). They are sent when the block
        ends, all at once (a 2026-07-28 input round carries every one the client can
        answer; elsewhere they are asked one after the other), and the block ends when all
        are answered: then each one's `.result()` is what its single call returns (or
        raises)."""
        return QuestionRound(self._chan)

    def log(self, text: Any, level: str = DEFAULT_LOG_LEVEL) -> None:
        """A line for the run's log, at `level` (debug, info, notice, warning, error,
        critical, alert, emergency: the levels of MCP's `notifications/message`, which
        sends it to a client that asked for that level or a lower one). Another level
        raises ValueError."""
        if level not in LOG_LEVELS:
            shown = repr(level)[:80]
            raise ValueError(f"ctx.log() level: {shown} is not one of {', '.join(LOG_LEVELS)}")
        self._chan.send({"type": "log", "text": cut_text(str(text), LOG_TEXT_LIMIT), "level": level})

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        if message is not None:
            # Bounded for the wire only: the run service redacts it whole, then cuts it.
            message = cut_text(str(message), LOG_TEXT_LIMIT)
        self._chan.send({"type": "progress", "done": done, "total": total, "message": message})

    def fail(self, err_code: int | str, message: str) -> None:
        raise WorkflowFailure(err_code, message)


def _materialise(params: dict[str, Any]) -> dict[str, Any]:
    """File params arrive as `{"$file": {...}}` markers and become ManagedFile objects."""

    def conv(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"$file"}:
            return ManagedFile(**value["$file"])
        if isinstance(value, list):
            return [conv(v) for v in value]
        return value

    return {k: conv(v) for k, v in params.items()}


def frame(msg: Any) -> bytes:
    """A message as its wire line; ctx files and paths sent as JSON."""
    return encode(msg, _json_default)
