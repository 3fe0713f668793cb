"""`steamharness ARGS` for a client that starts the command itself (an MCP SDK's stdio
transport), run by the test process's fork server (`tests/forkserver.py`).

`python -S -I tests/forkshim.py SOCKET ARGV0 ARGS...` starts in milliseconds (the standard library
only, no site): it hands its standard streams, directory, environment and ARGS to the fork
server, whose child is then the command the client talks to over those very pipes. The shim
stays as the client's process: a SIGTERM, SIGINT or SIGHUP it gets is passed on to the child,
and it exits with the child's exit code (by the same signal when a signal ended it). If the
shim is killed, the fork server sees its connection close and kills the child."""

import contextlib
import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main() -> int:
    path, argv0, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(path)
    umask = os.umask(0)
    os.umask(umask)
    request = {
        "argv": [argv0, *args],
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": umask,
        # A client that started the shim in a session of its own (the MCP SDKs do) gets the
        # command in one too.
        "new_session": os.getsid(0) == os.getpid(),
    }
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    answer = json.loads(conn.recv(65536) or b'{"error": "the fork server closed the connection"}')
    if "pid" not in answer:
        sys.stderr.write(f"forkshim: {answer.get('error')}\n")
        return 70
    pid = answer["pid"]
    # The child holds the streams now: the shim keeps none open (a reader sees the end of
    # the child's output when the child ends, not the shim).
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    while True:
        try:
            data = conn.recv(65536)
            break
        except InterruptedError:
            continue
    code = json.loads(data)["exit"] if data else -signal.SIGKILL
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
