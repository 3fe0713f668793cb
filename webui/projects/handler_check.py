"""The bounds of the handler check (webui.workflows.handlers) from the settings: its time,
its address space and, when this process is root, the worker user it imports handlers as."""

from __future__ import annotations

from webui.bounded_child import RunAs
from webui.runs.isolation import worker_user
from webui.settings import Settings
from webui.workflows.handlers import CheckBounds


def check_bounds(settings: Settings) -> CheckBounds:
    """Raises ConfigError when this process is root and the worker user does not exist."""
    user = worker_user(settings.worker_user, what="the handler check")
    return CheckBounds(
        seconds=settings.handler_check_seconds,
        memory_bytes=settings.handler_check_memory_bytes,
        run_as=RunAs(user.uid, user.gid) if user is not None else None,
    )
