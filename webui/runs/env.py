"""The environment a run's worker gets."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values

# Never handed to workflow code run by the server: it would make every handler an admin.
SERVER_ONLY_VARIABLES = frozenset({"STEAMHARNESS_SERVER_ADMIN_KEY"})


def worker_env(
    root: Path, explicit: Mapping[str, str], saved: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Saved auth < the project's .env < the explicit environment."""
    env = dict(saved or {})
    dotenv = root / ".env"
    if dotenv.is_file():
        env.update({k: v for k, v in dotenv_values(dotenv).items() if v is not None})
    env.update(explicit)
    return env


def server_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in SERVER_ONLY_VARIABLES}
