"""A workflow project whose handlers attack the worker model: they look for the server's
secrets, leave processes behind and send messages too large for the run socket."""

from __future__ import annotations

import json
from pathlib import Path

PROJECT_ID = "5e0c2f7a-91d3-4b8e-a6f1-2c3d4e5f6a7b"

ENTRYPOINTS = [
    {"id": "probe", "handler": "h.py:probe", "params": [{"name": "dataDir", "type": "string"}]},
    {"id": "scratch", "handler": "h.py:scratch"},
    {"id": "leave", "handler": "h.py:leave", "params": [{"name": "how", "type": "string"}]},
    {"id": "leave_and_crash", "handler": "h.py:leave_and_crash"},
    {"id": "leave_and_wait", "handler": "h.py:leave_and_wait"},
    {"id": "sibling", "handler": "h.py:sibling"},
    {"id": "smuggle", "handler": "h.py:smuggle", "params": [{"name": "target", "type": "string"}]},
    {"id": "big_output", "handler": "h.py:big_output", "params": [{"name": "size", "type": "number"}]},
    {"id": "big_log", "handler": "h.py:big_log", "params": [{"name": "size", "type": "number"}]},
    {"id": "big_progress", "handler": "h.py:big_progress", "params": [{"name": "size", "type": "number"}]},
    {"id": "big_ask", "handler": "h.py:big_ask", "params": [{"name": "size", "type": "number"}]},
    {"id": "raw_frame", "handler": "h.py:raw_frame", "params": [{"name": "size", "type": "number"}]},
    {"id": "garbage_frame", "handler": "h.py:garbage_frame"},
    {"id": "deep_frame", "handler": "h.py:deep_frame"},
    {
        "id": "forged_outcome",
        "handler": "h.py:forged_outcome",
        "params": [{"name": "frame", "type": "string"}],
    },
    {"id": "identity", "handler": "h.py:identity"},
]

# Handler source that finds the worker's run socket, to write raw frames to it (hostile code).
RUN_SOCKET_SOURCE = """
def _run_socket():
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                return int(name)
        except OSError:
            pass
    raise RuntimeError("no run socket")
"""

HANDLERS = (
    r'''
import ctypes
import os
import subprocess
import sys
import tempfile
import time

ADMIN_KEY_NAME = b"STEAMHARNESS_SERVER_ADMIN_KEY"


def _environ_hits(needle):
    hits, read = [], 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        read += 1
        if needle in data:
            hits.append(int(name))
    return hits, read


def probe(ctx):
    """Everything a handler could try to find the server's admin key or data."""
    # A process of our own with a marker in its environment proves the scan can see.
    # (Its line on stdout says its exec is complete: until then its environ is not yet
    # the new one, nor readable.)
    marker = subprocess.Popen(
        ["sh", "-c", "echo up; sleep 60"], env={"PROBE_MARKER": "1"}, stdout=subprocess.PIPE
    )
    try:
        marker.stdout.readline()
        hits, read = _environ_hits(ADMIN_KEY_NAME)
        marker_hits, _ = _environ_hits(b"PROBE_MARKER=1")
    finally:
        marker.kill()
        marker.wait()
    readable = []
    for dirpath, dirnames, filenames in os.walk(ctx.params["dataDir"]):
        readable.append(dirpath)
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as fh:
                    fh.read(1)
                readable.append(path)
            except OSError:
                pass
    for name in ("steamharness.sqlite3", "keys/fingerprint.key", "keys/ui-session.key"):
        try:
            with open(os.path.join(ctx.params["dataDir"], name), "rb") as fh:
                fh.read(1)
            readable.append(name)
        except OSError:
            pass
    return {
        "adminKeyIn": hits,
        "environsRead": read,
        "markerSeen": marker.pid in marker_hits,
        "readable": readable,
        "cwd": os.getcwd(),
        "envNames": sorted(os.environ),
        "uid": os.getuid(),
    }


def scratch(ctx):
    here = os.environ["TMPDIR"]
    with open(os.path.join(tempfile.gettempdir(), "note.txt"), "w") as fh:
        fh.write("left in scratch")
    st = os.stat(here)
    return {
        "tmpdir": here,
        "home": os.environ["HOME"],
        "tempfile": tempfile.gettempdir(),
        "cwd": os.getcwd(),
        "owner": st.st_uid,
        "mode": st.st_mode & 0o777,
        "uid": os.getuid(),
    }


def identity(ctx):
    with open("/proc/self/status") as fh:
        status = dict(line.split(":", 1) for line in fh if ":" in line)
    libc = ctypes.CDLL(None)
    return {
        "uid": os.getresuid(),
        "gid": os.getresgid(),
        "groups": os.getgroups(),
        "noNewPrivs": status["NoNewPrivs"].strip(),
        "dumpable": libc.prctl(3, 0, 0, 0, 0),
        "user": os.environ.get("USER"),
    }


def _report_pid(make):
    """Run `make(write_fd)` in a forked process tree; it writes the leftover's pid."""
    r, w = os.pipe()
    make(w)
    os.close(w)
    with os.fdopen(r) as fh:
        return int(fh.readline())


def _double_fork(w):
    if os.fork() == 0:
        if os.fork() == 0:
            os.write(w, f"{os.getpid()}\n".encode())
            time.sleep(300)  # keeps the log pipes (fds 1 and 2) open meanwhile
            os._exit(0)
        os._exit(0)
    os.wait()


def _daemonise(w):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.chdir("/")
            os.umask(0)
            os.write(w, f"{os.getpid()}\n".encode())
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    os.wait()


def _setsid_sleep():
    return subprocess.Popen(["setsid", "sleep", "300"]).pid


def leave(ctx):
    how = ctx.params["how"]
    if how == "setsid":
        pid = _setsid_sleep()
    elif how == "double_fork":
        pid = _report_pid(_double_fork)
    else:
        pid = _report_pid(_daemonise)
    os.kill(pid, 0)  # alive when the handler returns
    return {"pid": pid}


def leave_and_crash(ctx):
    ctx.progress(0, None, str(_setsid_sleep()))  # on the socket before the worker dies
    os._exit(3)


def leave_and_wait(ctx):
    ctx.progress(0, None, str(_setsid_sleep()))
    time.sleep(3600)


def sibling(ctx):
    """A process cloned as the worker's sibling (CLONE_PARENT): the zygote's child."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = libc.syscall(56, 0x00008000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT | SIGCHLD)
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "300"])
    return {"pid": pid, "worker": os.getpid(), "ppid": os.getppid()}


def smuggle(ctx):
    """Offer the server a link to one of its own files as a created output."""
    tmp = os.path.join(os.environ["TMPDIR"], ".create-smuggled")
    os.symlink(ctx.params["target"], tmp)
    try:
        ctx._chan.rpc("files.create", name="loot", tmp_path=tmp, mime_type="text/plain")
        refused = None
    except RuntimeError as exc:
        refused = str(exc)
    honest = ctx.files.create("honest.txt", "made by the handler")
    return {"refused": refused, "honest": honest.size}


def big_output(ctx):
    return "x" * int(ctx.params["size"])


def big_log(ctx):
    ctx.log("l" * int(ctx.params["size"]))
    return {"ok": True}


def big_progress(ctx):
    ctx.progress(1, 2, "p" * int(ctx.params["size"]))
    return {"ok": True}


def big_ask(ctx):
    field = {"name": "x", "type": "string", "description": "d" * int(ctx.params["size"])}
    return ctx.ask("Too much", [field])


'''
    + RUN_SOCKET_SOURCE
    + r"""

def raw_frame(ctx):
    ctx.progress(0, None, str(os.getpid()))
    os.write(_run_socket(), b'{"type":"log","text":"' + b"r" * int(ctx.params["size"]))
    time.sleep(3600)


def garbage_frame(ctx):
    ctx.progress(0, None, str(os.getpid()))
    os.write(_run_socket(), b"this is not json\n")
    time.sleep(3600)


def deep_frame(ctx):
    # Well-formed JSON nested past the parser's recursion limit (RecursionError, not ValueError).
    ctx.progress(0, None, str(os.getpid()))
    os.write(_run_socket(), b"[" * 200000 + b"]" * 200000 + b"\n")
    time.sleep(3600)


def forged_outcome(ctx):
    # An outcome the handler writes itself, as the worker would (a JSON frame on the socket).
    os.write(_run_socket(), ctx.params["frame"].encode() + b"\n")
    os._exit(0)
"""
)


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    package = {
        "id": PROJECT_ID,
        "name": "intruder",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"timeoutSeconds": 60, **ep} for ep in ENTRYPOINTS],
    }
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (folder / "h.py").write_text(HANDLERS, encoding="utf-8")
    return folder
