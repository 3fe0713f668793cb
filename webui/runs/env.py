"""The environment a run's worker gets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from dotenv import dotenv_values

# What `steamharness serve` hands its runs from its own environment. Everything else there
# is the server's: the admin key, a database URL, tokens the host's MCP servers use.
# Handlers get their own secrets from their project's .env.
SERVER_ENV_PASSED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ"})
# Never handed on, even when listed in worker_env_passthrough: the server's configuration.
SERVER_ONLY_PREFIX = "STEAMHARNESS_"


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


def server_base_env(environ: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
    """The part of the server's environment its runs see (before each project's .env)."""
    wanted = SERVER_ENV_PASSED | set(passthrough)
    return {
        k: v
        for k, v in environ.items()
        if (k in wanted or k.startswith("LC_")) and not k.startswith(SERVER_ONLY_PREFIX)
    }
