"""The worker side of a run: what a forked child executes, and the `ctx` a handler sees.

Standard library only, on purpose: the zygote preloads this module and forks one fresh
child per run, so nothing here may drag in the server stack (FastAPI, SQLAlchemy, the MCP
SDK) or share state between runs.

Wire: newline-delimited JSON over a Unix socket to the run service. The child says
`hello`, then sends `log`/`progress` notes, `rpc` requests (ask, approve, kv, values,
files) that block the handler until a `reply`, and finally `done` or `error`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import mimetypes
import os
import signal
import socket
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

READ_CHUNK = 65536


class WorkflowFailure(Exception):
    """Raised by `ctx.fail`: the run ends with a business `errCode`."""

    def __init__(self, err_code: int | str, message: str) -> None:
        super().__init__(message)
        self.err_code = err_code
        self.message = message


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
        # allow_nan=False: NaN/Infinity are not JSON; the handler's call fails here instead.
        data = (
            json.dumps(msg, separators=(",", ":"), default=_json_default, allow_nan=False) + "\n"
        ).encode()
        with self._send_lock:
            self._sock.sendall(data)

    def rpc(self, op: str, **args: Any) -> Any:
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        self.send({"type": "rpc", "id": rid, "op": op, "args": args})
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
        self.files = _Files(chan, spec["fileCreateDir"])
        self.related: dict[str, Path] = {k: Path(v) for k, v in (spec.get("related") or {}).items()}

    def ask(
        self, title: str, fields: list[dict[str, Any]], message: str | None = None
    ) -> dict[str, Any] | None:
        answer = self._chan.rpc("ask", title=title, fields=fields, message=message)
        return answer["content"] if answer["action"] == "accept" else None

    def approve(self, action: str, message: str | None = None, details: Any = None) -> bool:
        answer = self._chan.rpc("approve", action=action, message=message, details=details)
        return answer["action"] == "accept"

    def log(self, text: Any) -> None:
        self._chan.send({"type": "log", "text": str(text)})

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
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


def _forward(fd: int, chan: Channel, stream: str) -> None:
    while True:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except OSError:
            return
        if not chunk:
            return
        with contextlib.suppress(OSError):
            chan.send({"type": "output", "stream": stream, "text": chunk.decode("utf-8", "replace")})


def _set_environment(env: dict[str, str]) -> None:
    """Make os.environ exactly `env`, touching only what differs (each change is a
    putenv/unsetenv call, and most of the run's environment is the zygote's already)."""
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _load_handler(root: str, handler: str) -> Any:
    file_part, _, func_name = handler.rpartition(":")
    path = Path(root) / file_part
    spec = importlib.util.spec_from_file_location(f"workflow_handler_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load handler file {file_part}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    func = getattr(module, func_name, None)
    if not callable(func):
        raise AttributeError(f"handler {handler!r}: {func_name} is not a function in {file_part}")
    return func


def run_child(sock_path: str, cmd: dict[str, Any]) -> None:
    """Entry point in the forked child. Never returns."""
    code = 0
    try:
        code = _run_child(sock_path, cmd)
    except BaseException:  # the last line of defence in a process about to exit
        traceback.print_exc()
        code = 71
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_child(sock_path: str, cmd: dict[str, Any]) -> int:
    os.setsid()  # own process group: cancelling kills the handler's subprocesses too
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    chan = Channel(sock)
    threading.Thread(target=chan.read_forever, name="run-channel", daemon=True).start()

    # Everything that does not depend on the run is set up before saying hello, while
    # this worker is still a spare: the run itself starts with no set-up cost.
    # stdout/stderr of the handler (and of anything it spawns) become run log entries.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    forwarders = []
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        t = threading.Thread(target=_forward, args=(r, chan, stream), daemon=True)
        t.start()
        forwarders.append(t)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    chan.send({"type": "hello", "token": cmd["token"], "pid": os.getpid()})
    spec = chan.wait_start()

    os.chdir(spec["root"])
    _set_environment(spec.get("env") or {})
    sys.path.insert(0, spec["root"])

    outcome: dict[str, Any]
    try:
        func = _load_handler(spec["root"], spec["handler"])
        ctx = Context(chan, spec)
        outcome = {"type": "done", "output": func(ctx)}
    except WorkflowFailure as exc:
        outcome = {"type": "failed", "errCode": exc.err_code, "message": exc.message}
    except SystemExit as exc:
        outcome = {"type": "error", "message": f"The handler called sys.exit({exc.code!r})."}
    except BaseException as exc:
        traceback.print_exc()
        outcome = {"type": "error", "message": f"The handler raised {type(exc).__name__}."}
    try:
        json.dumps(outcome, default=_json_default, allow_nan=False)  # fail here, not in the run service
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        if reason.startswith("Out of range float"):
            reason = "it contains NaN or Infinity, which JSON cannot carry"
        outcome = {"type": "error", "message": f"The handler's output is not JSON-serialisable: {reason}"}

    # Let the log reach the run service before the outcome does.
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    for t in forwarders:
        t.join(timeout=5)
    chan.send(outcome)
    sock.shutdown(socket.SHUT_WR)
    return 0
