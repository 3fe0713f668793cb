"""The fork server (tests/processes.py, tests/forkserver.py): a forked `steamharness` answers
as the exec'd one does, takes the environment, directory and streams it is given, and never
outlives its requester."""

from __future__ import annotations

import errno
import json
import os
import pwd
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import processes
from tests.conftest import EXAMPLES, FIXTURES, server_env
from tests.helpers import WAIT, needs_root, process_gone

S = processes.STEAMHARNESS
ROOT = Path(__file__).resolve().parent.parent


def clean_env(**extra: str) -> dict[str, str]:
    return {**server_env(), **extra}


def children_of(pid: int) -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.add(int(name))
    return found


def gone(pid: int) -> bool:
    """Whether `pid` ends (or is a zombie) within WAIT: polling /proc, bounded."""
    deadline = time.monotonic() + WAIT
    while not process_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)  # polling /proc, bounded by the deadline
    return True


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["projects", "--help"],
        ["no-such-command"],
        ["structure", str(EXAMPLES / "hello")],
        ["mcp", "relative/dir", "--data-dir", "d"],
        ["keys", "create", "nobody", "--data-dir", "{tmp}/d"],
    ],
)
def test_a_forked_command_answers_as_the_executed_one(tmp_path: Path, args: list[str]) -> None:
    argv = [S, *(a.replace("{tmp}", str(tmp_path)) for a in args)]
    kwargs = {"capture_output": True, "text": True, "timeout": WAIT, "env": clean_env(), "cwd": tmp_path}
    forked = processes.run(argv, stdin=subprocess.DEVNULL, **kwargs)
    executed = subprocess.run(argv, stdin=subprocess.DEVNULL, **kwargs)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        executed.returncode,
        executed.stdout,
        executed.stderr,
    )


def test_the_environment_directory_and_stdin_are_the_requesters(tmp_path: Path) -> None:
    data = tmp_path / "from-env"
    (tmp_path / "work").mkdir()
    done = processes.run(
        [S, "users", "create", "alice", "--password-stdin"],
        input="correct horse battery staple\n",
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=clean_env(STEAMHARNESS_DATA_DIR=str(data)),
        cwd=tmp_path / "work",
    )
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(data / "steamharness.sqlite3") as db:
        assert db.execute("SELECT name, password_hash IS NOT NULL FROM accounts").fetchall() == [("alice", 1)]


def test_a_signal_ends_a_forked_server_as_it_ends_an_executed_one(tmp_path: Path) -> None:
    codes = []
    for start in (processes.Popen, subprocess.Popen):
        proc = start(
            [S, "mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / start.__name__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=clean_env(),
        )
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1  # serving
        proc.send_signal(signal.SIGTERM)
        codes.append(proc.wait(WAIT))
        proc.stdin.close()
        proc.stdout.close()
    assert codes[0] == codes[1]


def test_a_child_whose_requester_is_gone_is_killed(tmp_path: Path) -> None:
    proc = processes.Popen(
        [S, "mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(),
    )
    assert isinstance(proc, processes.ForkedProcess)
    pid = proc.pid
    assert proc.poll() is None
    proc._conn.close()  # as when the test process ends
    assert gone(pid)
    assert proc.stdin is not None
    proc.stdin.close()


def serving(argv: list[str]) -> subprocess.Popen[bytes]:
    """A stdio server (exec'd, or the launcher) started and seen answering a ping."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env())
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 7
    return proc


def ended(proc: subprocess.Popen[bytes], sig: int) -> int:
    proc.send_signal(sig)
    code = proc.wait(WAIT)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()
    return code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_launcher_passes_signals_on_and_exits_with_the_childs_code(tmp_path: Path, sig: int) -> None:
    command, args = processes.stdio_command(
        ["mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")]
    )
    server = processes.fork_server_pid()
    before = children_of(server)
    shim = serving([command, *args])  # the child answers on the shim's pipes
    (child,) = children_of(server) - before
    code = ended(shim, sig)
    assert gone(child)  # passed on (SIGTERM) or its requester gone (SIGKILL)
    assert code == ended(serving([S, *args[5:]]), sig)


@pytest.mark.exec_processes
def test_the_exec_marker_gives_real_processes(tmp_path: Path) -> None:
    proc = processes.Popen(
        [S, "mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=clean_env(),
    )
    try:
        assert isinstance(proc, subprocess.Popen)
        assert processes.stdio_command(["mcp"]) == (S, ["mcp"])
        deadline = time.monotonic() + WAIT
        while b"steamharness" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline  # the exec completing, bounded
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait(WAIT)
        assert proc.stdin is not None
        proc.stdin.close()


def test_python_starts_the_launcher_without_site(tmp_path: Path) -> None:
    command, args = processes.stdio_command(["--help"])
    assert command == sys.executable and args[:2] == ["-S", "-I"]
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=WAIT, env=clean_env())
    assert done.returncode == 0 and "Usage: steamharness" in done.stdout


def test_a_script_forked_for_the_launcher_sees_what_its_exec_sees(tmp_path: Path) -> None:
    script = FIXTURES / "who_am_i.py"
    entry = processes.python_script(script, "x")
    env = {"PATH": os.environ["PATH"], "WHO_AM_I_MARK": "m"}
    seen = []
    for command in ([entry["command"], *entry["args"]], [sys.executable, str(script), "x"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        seen.append(json.loads(done.stdout))
    assert seen[0] == seen[1]
    assert seen[0]["cwd"] == str(tmp_path) and seen[0]["env"] == "m" and seen[0]["argv"] == [str(script), "x"]


def _request_as_nobody(path: str) -> dict[str, Any]:
    """A request for who_am_i.py sent by a copy of this process switched to nobody: its
    answer, or {"connect": errno} when it could not reach the socket."""
    nobody = pwd.getpwnam("nobody")
    request = json.dumps({"argv": [str(FIXTURES / "who_am_i.py")], "env": {}, "cwd": "/"}).encode()
    null = os.open(os.devnull, os.O_RDWR)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # no exec: nobody may not run this interpreter
        code = 99
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
            os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                conn.connect(path)
            except OSError as exc:
                os.write(write, json.dumps({"connect": exc.errno}).encode())
            else:
                socket.send_fds(conn, [request], [null, null, null])
                os.write(write, conn.recv(65536))
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    os.close(null)
    with os.fdopen(read, "rb") as out:
        printed = out.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, printed
    return json.loads(printed)


@needs_root
def test_another_user_can_neither_reach_the_socket_nor_be_served() -> None:
    """Workflow code under a run's uid could otherwise get processes out of its run's reach."""
    assert _request_as_nobody(processes.fork_server_socket()) == {"connect": errno.EACCES}
    server = processes._Server()  # one of its own, opened to everyone to reach the uid check
    path = server.socket_path()
    try:
        os.chmod(os.path.dirname(path), 0o755)
        os.chmod(path, 0o666)
        assert _request_as_nobody(path) == {"error": "only the fork server's own user is served"}
    finally:
        server.stop()


def test_a_malformed_request_is_refused_and_the_fork_server_serves_on(tmp_path: Path) -> None:
    path = processes.fork_server_socket()
    for message in (b"[" * 200_000, b"{}", b"not json", b'{"argv": "x"}'):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(path)
        null = os.open(os.devnull, os.O_RDWR)
        try:
            socket.send_fds(conn, [message], [null, null, null])
            assert "error" in json.loads(conn.recv(65536))
        finally:
            os.close(null)
            conn.close()
    done = processes.run([S, "--help"], capture_output=True, text=True, timeout=WAIT, env=clean_env())
    assert done.returncode == 0 and "Usage: steamharness" in done.stdout


def test_a_child_gets_the_umask_and_the_session_asked_for(tmp_path: Path) -> None:
    script = tmp_path / "ids.py"
    script.write_text(
        "import json, os\nm = os.umask(0)\nprint(json.dumps([m, os.getsid(0) == os.getpid()]))\n",
        encoding="utf-8",
    )
    old = os.umask(0o027)
    try:
        for new_session in (False, True):
            proc = processes.ForkedProcess(
                [str(script)], stdout=subprocess.PIPE, env=clean_env(), start_new_session=new_session
            )
            out, _ = proc.communicate(timeout=WAIT)
            assert json.loads(out) == [0o027, new_session]
    finally:
        os.umask(old)


def test_a_children_die_with_the_fork_server(tmp_path: Path) -> None:
    server = processes._Server()
    path = server.socket_path()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(path)
    null = os.open(os.devnull, os.O_RDWR)
    request = {
        "argv": [S, "mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")],
        "env": clean_env(),
    }
    read, write = os.pipe()  # its stdin: open, so it serves until killed
    try:
        socket.send_fds(conn, [json.dumps(request).encode()], [read, null, null])
        child = json.loads(conn.recv(65536))["pid"]
        assert not process_gone(child)
        server.stop()  # SIGKILL: no chance to kill its children itself
        assert gone(child)
    finally:
        for fd in (null, read, write):
            os.close(fd)
        conn.close()


def test_the_fork_server_starts_with_none_of_the_test_processes_other_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a child shows in /proc/PID/environ is the fork server's start: no secret of the run."""
    monkeypatch.setenv("SOME_CI_TOKEN", "t0ken")
    server = processes._Server()  # one of its own, started with this environment
    server.socket_path()
    assert server.proc is not None
    try:
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes()
    finally:
        server.stop()
    assert b"t0ken" not in environ and b"STEAMHARNESS_" not in environ
    names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
    assert names <= {*processes.ZYGOTE_ENV, *(n for n in names if n.startswith("LC_"))}
