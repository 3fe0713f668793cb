"""The worker side of a run: what a forked child executes, and the `ctx` a handler sees.

Standard library only, on purpose: the zygote preloads this module and forks one fresh
child per run, so nothing here may drag in the server stack (FastAPI, SQLAlchemy, the MCP
SDK) or share state between runs.

Wire: newline-delimited JSON over a Unix socket to the run service. The child says
`hello`, then sends `log`/`progress` notes, `rpc` requests (ask, approve, kv, values,
files, related) that block the handler until a `reply`, and finally `done`, `failed` or `error`.
No message is larger than MAX_FRAME_BYTES: log text and progress messages are cut, a
request that would be larger raises MessageTooLarge in the handler, and an outcome that
would be larger becomes an `output_too_large` error.

Isolation: the child is forked as root (when the server runs as root) and, once it has its
run, prepares what needs privileges (the run's scratch directory, copies of the file
params, the project folder as working directory) and then drops to the worker user for
good before any workflow code runs. It is a child subreaper: when the handler returns,
every process it left behind (daemonised, double-forked, setsid) is killed before the
outcome is sent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import mimetypes
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from webui.runs import procs

READ_CHUNK = 65536
# The run service reads at most this much per message (one JSON line).
MAX_FRAME_BYTES = 16 * 1024 * 1024
# In characters; with JSON escaping even the worst text stays far below the frame limit.
LOG_TEXT_LIMIT = 1024 * 1024
PROGRESS_MESSAGE_LIMIT = 4096


class MessageTooLarge(ValueError):
    """A request to the run service that would exceed MAX_FRAME_BYTES."""


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
        self.send_frame(encode(msg))

    def send_frame(self, data: bytes) -> None:
        if len(data) > MAX_FRAME_BYTES:
            raise MessageTooLarge(f"the message is {_mb(len(data))}, over the {_mb(MAX_FRAME_BYTES)} limit")
        with self._send_lock:
            self._sock.sendall(data)

    def rpc(self, op: str, **args: Any) -> Any:
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        data = encode({"type": "rpc", "id": rid, "op": op, "args": args})
        if len(data) > MAX_FRAME_BYTES:
            raise MessageTooLarge(
                f"ctx {op}: the request is {_mb(len(data))} as JSON, over the"
                f" {_mb(MAX_FRAME_BYTES)} a message to the server may be"
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


def encode(msg: dict[str, Any]) -> bytes:
    # allow_nan=False: NaN/Infinity are not JSON; the handler's call fails here instead.
    return (json.dumps(msg, separators=(",", ":"), default=_json_default, allow_nan=False) + "\n").encode()


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text) - limit} more characters]"


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
        self.files = _Files(chan, spec["fileCreateDir"])
        self.related: Mapping[str, RelatedProject] = _Related(
            chan, dict(spec.get("relatedIds") or {}), dict(spec.get("related") or {})
        )
        # The configuration the run started with (every declared field; read-only).
        self.config: Mapping[str, Any] = MappingProxyType(dict(spec.get("config") or {}))

    def ask(
        self, title: str, fields: list[dict[str, Any]], message: str | None = None
    ) -> dict[str, Any] | None:
        answer = self._chan.rpc("ask", title=title, fields=fields, message=message)
        return answer["content"] if answer["action"] == "accept" else None

    def approve(self, action: str, message: str | None = None, details: Any = None) -> bool:
        answer = self._chan.rpc("approve", action=action, message=message, details=details)
        return answer["action"] == "accept"

    def log(self, text: Any) -> None:
        self._chan.send({"type": "log", "text": _cut(str(text), LOG_TEXT_LIMIT)})

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        if message is not None:
            message = _cut(str(message), PROGRESS_MESSAGE_LIMIT)
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


def _copy_file_params(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """File params point into the server's private store: give the run its own copies."""

    def conv(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"$file"}:
            meta = dict(value["$file"])
            folder = os.path.join(scratch, "inputs", os.path.basename(str(meta["id"])))
            os.makedirs(folder, mode=0o700, exist_ok=True)
            name = os.path.basename(str(meta.get("name") or ""))
            dest = os.path.join(folder, name if name not in ("", ".", "..") else "file")
            shutil.copyfile(meta["path"], dest)
            meta["path"] = dest
            return {"$file": meta}
        if isinstance(value, list):
            return [conv(v) for v in value]
        return value

    return {k: conv(v) for k, v in params.items()}


def _hold_import_dirs() -> dict[int, int]:
    """Descriptors of the import path's folders, opened while still privileged: Python
    itself may live where the worker user cannot go by name (an installation under a
    private home), and handlers import from it after the switch."""
    held: dict[int, int] = {}
    for index, entry in enumerate(sys.path):
        if entry and os.path.isdir(entry):
            with contextlib.suppress(OSError):
                held[index] = os.open(entry, os.O_RDONLY | os.O_DIRECTORY)
    return held


def _reach_import_dirs(held: dict[int, int]) -> None:
    """After the switch: folders the worker can no longer reach by name are imported
    from through their descriptors; the others keep their names."""
    for index, fd in held.items():
        if os.access(sys.path[index], os.R_OK | os.X_OK):
            os.close(fd)
        else:
            sys.path[index] = f"/proc/self/fd/{fd}"
    sys.path_importer_cache.clear()


def _become(user: dict[str, Any], scratch: str) -> None:
    """Hand the scratch directory to the worker user, then become that user for good:
    no groups, real = effective = saved ids, no way back up through setuid binaries, and
    not dumpable (other runs share the user)."""
    uid, gid = int(user["uid"]), int(user["gid"])
    for dirpath, _dirnames, filenames in os.walk(scratch):
        os.chown(dirpath, uid, gid, follow_symlinks=False)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError("could not switch to the worker user")
    procs.prctl(procs.PR_SET_NO_NEW_PRIVS, 1)
    procs.prctl(procs.PR_SET_DUMPABLE, 0)


def _prepare(spec: dict[str, Any]) -> dict[str, Any]:
    """Everything before workflow code runs; returns the spec the handler sees."""
    scratch = spec["scratch"]
    user = spec.get("user")
    os.mkdir(scratch, 0o700)
    spec = dict(spec)
    if user:
        spec["params"] = _copy_file_params(spec.get("params") or {}, scratch)
    # Opened before dropping: the folder may only be reachable as root (a private parent
    # directory), and the worker then still finds it as its working directory and
    # through this descriptor.
    root_fd = os.open(spec["root"], os.O_RDONLY | os.O_DIRECTORY)
    os.fchdir(root_fd)
    if user:
        held = _hold_import_dirs()
        _become(user, scratch)
        _reach_import_dirs(held)
    if os.access(spec["root"], os.X_OK):
        os.close(root_fd)
    else:  # imports and the handler file go through the descriptor instead of the path
        spec["root"] = f"/proc/self/fd/{root_fd}"
    env = dict(spec.get("env") or {})
    env.update(HOME=scratch, TMPDIR=scratch)
    if user:
        env.update(USER=str(user["name"]), LOGNAME=str(user["name"]))
    _set_environment(env)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    sys.path.insert(0, spec["root"])
    if spec.get("fileCreateDir") is None:
        spec["fileCreateDir"] = scratch
    return spec


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
    # Whatever the handler leaves behind becomes this process's child, to be killed.
    procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)
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

    outcome: dict[str, Any]
    try:
        spec = _prepare(spec)
    except Exception as exc:
        traceback.print_exc()
        outcome = {"type": "error", "message": f"The run could not be prepared: {type(exc).__name__}."}
    else:
        outcome = _call_handler(chan, spec)
    frame = _outcome_frame(outcome)

    # The run is over for everything it started, and nothing it left behind holds the
    # log pipes open (the forwarders below would wait for it).
    procs.kill_descendants()
    # Let the log reach the run service before the outcome does.
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    for t in forwarders:
        t.join(timeout=5)
    chan.send_frame(frame)
    sock.shutdown(socket.SHUT_WR)
    return 0


def _call_handler(chan: Channel, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        func = _load_handler(spec["root"], spec["handler"])
        ctx = Context(chan, spec)
        return {"type": "done", "output": func(ctx)}
    except WorkflowFailure as exc:
        return {"type": "failed", "errCode": exc.err_code, "message": exc.message}
    except MessageTooLarge as exc:
        traceback.print_exc()
        return {"type": "error", "code": "output_too_large", "message": f"The handler sent too much: {exc}."}
    except SystemExit as exc:
        return {"type": "error", "message": f"The handler called sys.exit({exc.code!r})."}
    except BaseException as exc:
        traceback.print_exc()
        return {"type": "error", "message": f"The handler raised {type(exc).__name__}."}


def _outcome_frame(outcome: dict[str, Any]) -> bytes:
    """The outcome as one wire message, or an error that says why it cannot be one."""
    try:
        frame = encode(outcome)
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        if reason.startswith("Out of range float"):
            reason = "it contains NaN or Infinity, which JSON cannot carry"
        return encode(
            {"type": "error", "message": f"The handler's output is not JSON-serialisable: {reason}"}
        )
    if len(frame) <= MAX_FRAME_BYTES:
        return frame
    what = "output" if outcome.get("type") == "done" else "failure message"
    message = f"The handler's {what} is {_mb(len(frame))} as JSON, over the {_mb(MAX_FRAME_BYTES)} limit."
    return encode({"type": "error", "code": "output_too_large", "message": message})
