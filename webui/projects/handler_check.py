"""The bounds of the handler check (webui.workflows.handlers) from the settings: its time,
its address space and, when this process is root, the user it imports handlers as.

Under root that user is one no other process of the server's runs as: the uid just past
the runs' own range (`worker_uid_base` + `worker_uid_count`), with the same number as its
group, where the runs' range is in use and that uid, like the range, is mapped and names
no account or group. Only where runs share `worker_user` does the check run as it too.
Never `worker_user` beside a range: the host's stdio MCP servers run as `worker_user` by
default (`host_server_user`), and a draft's handler file, imported as their user, could
read their environment (the tokens configured for them) or signal them."""

from __future__ import annotations

import contextlib

from webui.bounded_child import RunAs
from webui.errors import ConfigError
from webui.runs import procs
from webui.runs.isolation import worker_uids, worker_user
from webui.settings import Settings
from webui.workflows.handlers import CheckBounds

# setresuid takes a uid below this (2^32 - 1 is "no change").
_MAX_UID = 2**32 - 2


def check_bounds(settings: Settings) -> CheckBounds:
    """Raises ConfigError when this process is root and the worker user does not exist."""
    user = worker_user(settings.worker_user, what="the handler check")
    run_as = None
    if user is not None:
        own = check_uid(settings)
        run_as = RunAs(own, own) if own is not None else RunAs(user.uid, user.gid)
    else:
        private_self()
    return CheckBounds(
        seconds=settings.handler_check_seconds,
        memory_bytes=settings.handler_check_memory_bytes,
        run_as=run_as,
    )


def check_uid(settings: Settings) -> int | None:
    """The check's own uid under root (the one past the runs' range), or None: runs share
    `worker_user`, or that uid cannot be used (unmapped, an account's or a group's)."""
    base, count = settings.worker_uid_base, settings.worker_uid_count
    if count <= 0 or base + count > _MAX_UID:
        return None
    try:
        # The runs' range and the check's uid, checked as the range alone is (mapped, no name).
        extended = worker_uids(base, count + 1)
    except ConfigError:
        return None
    return base + count if extended is not None else None


def private_self() -> None:
    """Not root: the check imports handlers as this process's own user, so this process is
    made non-dumpable first, as the runs' zygote is. A process of the same user (the
    check's child, or a process a handler file left) can then neither read this one's
    environment (a database password, a key) nor its memory through /proc."""
    with contextlib.suppress(OSError):
        procs.prctl(procs.PR_SET_DUMPABLE, 0)
