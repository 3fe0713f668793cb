"""The worker side of a run: what a forked child executes (the `ctx` its handler sees is
webui.runs.context; every message it exchanges, webui.runs.messages).

Standard library only, on purpose: the zygote preloads this module and forks one fresh
child per run, so nothing here may drag in the server stack (FastAPI, SQLAlchemy, the MCP
SDK) or share state between runs.

Wire: newline-delimited JSON over a Unix socket to the run service. The child says
`hello`, then sends `log`/`progress` notes, `rpc` requests (ask, approve, kv, values,
files, related) that block the handler until a `reply`, and finally `done`, `failed` or `error`.
No message is larger than MAX_FRAME_BYTES: log text and progress messages are cut, a
request that would be larger raises MessageTooLarge in the handler, and an outcome that
would be larger becomes an `output_too_large` error.

Isolation: the child is forked as root (when the server runs as root). As a spare, still
single-threaded, it builds its filesystem view when the zygote has one planned
(webui.runs.view). Once it has its run, it prepares what needs privileges (the run's
scratch directory, copies of the file params, the view entered, the project folder as
working directory) and then drops to the worker user for good before any workflow code
runs. It is a child subreaper: when the handler returns, every process it left behind
(daemonised, double-forked, setsid) is killed before the outcome is sent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

from webui.runs import procs
from webui.runs.context import Channel, Context, WorkflowFailure, frame
from webui.runs.context_questions import ClientRequestRefused
from webui.runs.messages import MAX_FRAME_BYTES, READ_CHUNK, MessageTooLarge, mb
from webui.runs.view import View


def _forward(streams: dict[int, str], chan: Channel) -> None:
    """One thread for both of the handler's output pipes, until each is closed."""
    while streams:
        try:
            ready, _, _ = select.select(list(streams), [], [])
        except InterruptedError:
            continue
        for fd in ready:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                del streams[fd]
                continue
            with contextlib.suppress(OSError):
                chan.send({"type": "output", "stream": streams[fd], "text": chunk.decode("utf-8", "replace")})


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


def _prepare(spec: dict[str, Any], own_view: View | OSError | None) -> dict[str, Any]:
    """Everything before workflow code runs; returns the spec the handler sees.
    `own_view`: the view this worker built as a spare (why it could not: the run fails), or
    None when the zygote was given none."""
    scratch = spec["scratch"]
    user = spec.get("user")
    os.mkdir(scratch, 0o700)
    spec = dict(spec)
    if user:
        spec["params"] = _copy_file_params(spec.get("params") or {}, scratch)
    if isinstance(own_view, OSError):
        raise own_view
    if own_view is not None:
        # Over stdio, a related project's folder is the handler's too (`ctx.related[a].path`).
        related = [str(p) for p in (spec.get("related") or {}).values()]
        own_view.enter(project=spec["root"], scratch=scratch, shared=related)
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


def run_child(sock_path: str, cmd: dict[str, Any], plan: View | None = None) -> None:
    """Entry point in the forked child (`plan`: the view every run gets, as the zygote
    worked it out). Never returns."""
    code = 0
    try:
        code = _run_child(sock_path, cmd, plan)
    except BaseException:  # the last line of defence in a process about to exit
        traceback.print_exc()
        code = 71
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _build_view(plan: View | None) -> View | OSError | None:
    """This spare's filesystem view, built before any thread starts (a thread keeps the
    namespace it started in); the error instead if it cannot be."""
    if plan is None:
        return None
    try:
        return plan.prepare()
    except OSError as exc:
        return exc


def _run_child(sock_path: str, cmd: dict[str, Any], plan: View | None) -> int:
    os.setsid()  # own process group: cancelling kills the handler's subprocesses too
    # Whatever the handler leaves behind becomes this process's child, to be killed.
    procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    own_view = _build_view(plan)
    chan = Channel(sock)
    threading.Thread(target=chan.read_forever, name="run-channel", daemon=True).start()

    # Everything that does not depend on the run is set up before saying hello, while
    # this worker is still a spare: the run itself starts with no set-up cost.
    # stdout/stderr of the handler (and of anything it spawns) become run log entries.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    streams: dict[int, str] = {}
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        streams[r] = stream
    forwarder = threading.Thread(target=_forward, args=(streams, chan), name="run-output", daemon=True)
    forwarder.start()
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    chan.send({"type": "hello", "token": cmd["token"], "pid": os.getpid()})
    spec = chan.wait_start()

    outcome: dict[str, Any]
    try:
        spec = _prepare(spec, own_view)
    except Exception as exc:
        traceback.print_exc()
        outcome = {"type": "error", "message": f"The run could not be prepared: {type(exc).__name__}."}
    else:
        outcome = _call_handler(chan, spec)
    last = _outcome_frame(outcome)

    # The run is over for everything it started, and nothing it left behind holds the
    # log pipes open (the forwarder below would wait for it).
    procs.kill_descendants()
    # Let the log reach the run service before the outcome does.
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    forwarder.join(timeout=5)
    chan.send_frame(last)
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
    except ClientRequestRefused as exc:
        traceback.print_exc()
        if exc.capability is None:  # the client declined: the handler's own error
            return {"type": "error", "message": f"The handler raised ClientRequestRefused: {exc}."}
        # The client never declared what the handler needs: said as such, so the call can
        # answer as for a tool that requires it (-32021 at 2026-07-28).
        return {
            "type": "error",
            "code": "capability_required",
            "requires": [exc.capability],
            "message": f"The handler needs a client that declares {exc.capability}: {exc}.",
        }
    except SystemExit as exc:
        return {"type": "error", "message": f"The handler called sys.exit({exc.code!r})."}
    except BaseException as exc:
        traceback.print_exc()
        return {"type": "error", "message": f"The handler raised {type(exc).__name__}."}


def _outcome_frame(outcome: dict[str, Any]) -> bytes:
    """The outcome as one wire message, or an error that says why it cannot be one."""
    try:
        data = frame(outcome)
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        if reason.startswith("Out of range float"):
            reason = "it contains NaN or Infinity, which JSON cannot carry"
        return frame({"type": "error", "message": f"The handler's output is not JSON-serialisable: {reason}"})
    if len(data) <= MAX_FRAME_BYTES:
        return data
    what = "output" if outcome.get("type") == "done" else "failure message"
    message = f"The handler's {what} is {mb(len(data))} as JSON, over the {mb(MAX_FRAME_BYTES)} limit."
    return frame({"type": "error", "code": "output_too_large", "message": message})
