"""`steamharness` processes for the tests: `run` and `Popen` (subprocess's, for the
`steamharness` command) and `stdio_command` (what an MCP SDK's stdio transport starts).

By default a process is a child of this test process's fork server (`tests/forkserver.py`):
the real command in a real process, with the pipes, files, port, signals and exit code the
test gives or sees, minus the interpreter start and the imports (about a second of CPU per
command, four per `serve`). A real exec is kept where the process itself is the subject —
its `/proc` cmdline or environ, what the interpreter does at start — by the
`exec_processes` marker (a module's `pytestmark`), and for the whole run by
STEAMHARNESS_TEST_EXEC=1. Any other argv goes to subprocess unchanged."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.helpers import WAIT

STEAMHARNESS = str(Path(sys.executable).parent / "steamharness")
SHIM = str(Path(__file__).with_name("forkshim.py"))
ROOT = Path(__file__).resolve().parent.parent
ZYGOTE_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "PYTHONUTF8",
    "PYTHONIOENCODING",
)

EXEC_ALWAYS = os.environ.get("STEAMHARNESS_TEST_EXEC") == "1"
# Set per test by tests/conftest.py from the `exec_processes` marker.
exec_only = EXEC_ALWAYS


class _Server:
    """This test process's fork server, started at first use and stopped at exit, by PID."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.path = ""

    def socket_path(self) -> str:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            return self.path

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="shfork-")
        self.path = os.path.join(folder, "fork.sock")
        log = open(os.path.join(folder, "forkserver.log"), "ab")  # noqa: SIM115
        # What the interpreter reads at its start, nothing more: every child gets its own
        # environment, but /proc/PID/environ of a child (a user's, after a switch) shows this.
        env = {k: v for k, v in os.environ.items() if k in ZYGOTE_ENV or k.startswith("LC_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", self.path],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        log.close()
        assert self.proc.stdout is not None
        ready: list[bytes] = []
        reader = threading.Thread(target=lambda: ready.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(WAIT)
        if ready != [b"ready\n"]:
            self.proc.kill()
            self.proc.wait()
            log_text = Path(folder, "forkserver.log").read_text(errors="replace")
            raise AssertionError(f"the fork server did not start within {WAIT}s:\n{log_text}")
        atexit.register(self.stop)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


_server = _Server()


def _fd(stream: Any, default: int, opened: list[int]) -> int:
    """The fd a child's standard stream is given for a subprocess-style argument."""
    if stream is None:
        return default
    if stream == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd
    if isinstance(stream, int):
        return stream
    return stream.fileno()


def _umask() -> int:
    """This process's umask, read without setting it (other threads may create files)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    return 0o022


class ForkedProcess:
    """A fork server's child, answering like `subprocess.Popen`."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        text: bool = False,
        start_new_session: bool = False,
        **unsupported: Any,
    ) -> None:
        assert not unsupported, f"not supported for a forked process: {sorted(unsupported)}"
        self.args = list(args)
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        self._lock = threading.Lock()
        opened: list[int] = []
        ours: dict[str, int] = {}
        fds = []
        for name, stream, default in (("stdin", stdin, 0), ("stdout", stdout, 1), ("stderr", stderr, 2)):
            if stream == subprocess.PIPE:
                read, write = os.pipe()
                theirs, ours[name] = (read, write) if name == "stdin" else (write, read)
                opened.append(theirs)
                fds.append(theirs)
            elif name == "stderr" and stream == subprocess.STDOUT:
                fds.append(fds[1])
            else:
                fds.append(_fd(stream, default, opened))
        request = {
            "argv": self.args,
            "env": dict(os.environ if env is None else env),
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "umask": _umask(),
            "new_session": start_new_session,
        }
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._conn.connect(_server.socket_path())
            socket.send_fds(self._conn, [json.dumps(request).encode()], fds)
            self._conn.settimeout(WAIT)
            answer = json.loads(
                self._conn.recv(65536) or b'{"error": "the fork server closed the connection"}'
            )
        except BaseException:
            self._conn.close()
            for fd in ours.values():
                os.close(fd)
            raise
        finally:
            for fd in opened:
                os.close(fd)
        if "pid" not in answer:
            self._conn.close()
            for fd in ours.values():
                os.close(fd)
            raise OSError(f"the fork server refused {self.args}: {answer.get('error')}")
        self.pid: int = answer["pid"]
        for name, fd in ours.items():
            mode = "w" if name == "stdin" else "r"
            stream_obj = (
                open(fd, mode, encoding="utf-8")  # noqa: SIM115
                if text
                else open(fd, mode + "b")  # noqa: SIM115
            )
            setattr(self, name, stream_obj)

    def _receive(self, timeout: float | None) -> None:
        # One reader at a time; a poll never waits for a wait in another thread.
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return
        try:
            if self.returncode is not None:
                return
            self._conn.settimeout(timeout)
            try:
                data = self._conn.recv(65536)
            except (TimeoutError, BlockingIOError):
                return
            # Without an exit report the fork server is gone, and its children died with it
            # (their parent-death signal).
            self.returncode = json.loads(data)["exit"] if data else -signal.SIGKILL
            self._conn.close()
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        self._receive(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._receive(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        results: dict[str, Any] = {}

        def read(name: str) -> None:
            stream = getattr(self, name)
            try:
                results[name] = stream.read()
            except Exception as exc:  # undecodable output: raised as subprocess would
                results[name + "_error"] = exc
            finally:
                stream.close()

        readers = [
            threading.Thread(target=read, args=(n,), daemon=True)
            for n in ("stdout", "stderr")
            if getattr(self, n)
        ]
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        self.wait(timeout)
        for reader in readers:
            reader.join(WAIT)
            if reader.is_alive():  # a grandchild holding the pipe open: no half answer
                raise subprocess.TimeoutExpired(self.args, WAIT)
        for name in ("stdout_error", "stderr_error"):
            if name in results:
                raise results[name]
        return results.get("stdout"), results.get("stderr")

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


def _forks(args: Sequence[Any]) -> bool:
    return not exec_only and bool(args) and str(args[0]) == STEAMHARNESS


def Popen(args: Sequence[Any], **kwargs: Any) -> Any:
    """`subprocess.Popen`, forked from the fork server when it runs `steamharness`."""
    if not _forks(args):
        return subprocess.Popen(args, **kwargs)
    text = bool(kwargs.pop("text", False) or kwargs.pop("universal_newlines", False))
    return ForkedProcess([str(a) for a in args], text=text, **kwargs)


def run(args: Sequence[Any], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run`, forked from the fork server when it runs `steamharness`."""
    if not _forks(args):
        return subprocess.run(args, **kwargs)
    input_ = kwargs.pop("input", None)
    timeout = kwargs.pop("timeout", None)
    check = kwargs.pop("check", False)
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input_ is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = Popen(args, **kwargs)
    try:
        out, err = proc.communicate(input_, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(WAIT)
        raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def python_script(script: str | os.PathLike[str], *args: str) -> dict[str, Any]:
    """A servers.json stdio entry ({command, args}) running a Python script of the tests
    (an MCP server fixture): forked by the fork server, or `python SCRIPT ARGS`."""
    if exec_only:
        return {"command": sys.executable, "args": [os.fspath(script), *args]}
    return {
        "command": sys.executable,
        "args": ["-S", "-I", SHIM, _server.socket_path(), os.fspath(script), *args],
    }


def fork_server_socket() -> str:
    """The path of this test process's fork server's socket (started if it is not yet)."""
    return _server.socket_path()


def fork_server_pid() -> int:
    """The pid of this test process's fork server (started if it is not yet)."""
    _server.socket_path()
    assert _server.proc is not None
    return _server.proc.pid


def stdio_command(args: Sequence[str]) -> tuple[str, list[str]]:
    """The command and arguments an MCP client starts for `steamharness ARGS`."""
    if exec_only:
        return STEAMHARNESS, list(args)
    return sys.executable, ["-S", "-I", SHIM, _server.socket_path(), STEAMHARNESS, *args]
