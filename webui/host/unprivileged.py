"""Start a configured stdio MCP server as an unprivileged user.

`python -I -m webui.host.unprivileged UID GID HOME COMMAND [ARGS...]`: drop every group,
switch real, effective and saved ids to UID/GID for good, forbid a way back up through
setuid programs, and exec COMMAND (looked up on the PATH of its environment). The host
service prefixes this to a server's command when the server runs as root, so a
configured server never has root's access to the data dir, the database or the keys.

The server's configured environment arrives as JSON in one variable, `ENV_VARIABLE`, and
becomes the program's environment only at its exec: this interpreter, which starts as
root, never runs with what a server file set (`LD_PRELOAD`, `PYTHONPATH`...). Standard
library only: it runs before anything else in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import sys

from webui.runs import procs

ENV_VARIABLE = "STEAMHARNESS_LAUNCH_ENV"


def drop_to(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError("could not switch to the unprivileged user")
    procs.prctl(procs.PR_SET_NO_NEW_PRIVS, 1)


def main(argv: list[str]) -> None:
    if len(argv) < 5:
        sys.stderr.write("usage: python -m webui.host.unprivileged UID GID HOME COMMAND [ARGS...]\n")
        raise SystemExit(2)
    uid, gid, home, command = int(argv[1]), int(argv[2]), argv[3], argv[4:]
    env = dict(os.environ)
    env.update(json.loads(env.pop(ENV_VARIABLE, "{}")))
    drop_to(uid, gid)
    try:
        os.chdir(home)  # the server's own working directory may be root's alone
    except OSError:
        os.chdir("/")
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"could not start {command[0]}: {exc.strerror or exc}\n")
        raise SystemExit(127) from None


if __name__ == "__main__":
    main(sys.argv)
