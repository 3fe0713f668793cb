"""The CLI's saved login: `workflow-auth.json` in the auth dir.

`steamharness login` writes it (server URL and key, owner-only, atomically), `logout`
removes it, and `steamharness mcp` hands its values to workflow handlers as
STEAMHARNESS_SERVER_URL and STEAMHARNESS_SERVER_ADMIN_KEY (explicit environment variables
win). It is written as `{"serverUrl": ..., "apiKey": ...}`; older spellings are still read.

A saved server URL is `https://`, or plain `http://` to a loopback address only: over plain
HTTP the key would cross the network readable by anyone on the path (`plain_http_refusal`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from webui import strict_json
from webui.addresses import is_loopback_host
from webui.errors import ConfigError

AUTH_FILE = "workflow-auth.json"
URL_ENV = "STEAMHARNESS_SERVER_URL"
KEY_ENV = "STEAMHARNESS_SERVER_ADMIN_KEY"
# Each variable, and the keys of the file it is read from, first found wins.
ALIASES: dict[str, tuple[str, ...]] = {
    URL_ENV: (URL_ENV, "serverUrl", "server_url"),
    KEY_ENV: (KEY_ENV, "adminKey", "admin_key", "apiKey"),
}


def plain_http_refusal(url: str) -> str | None:
    """Why a key must not be sent to `url`, or None: plain http:// is refused except to
    this machine (127.0.0.1, localhost, [::1]), where no network is crossed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return None  # not a URL at all: the caller's own check words that
    if parts.scheme.lower() != "http" or is_loopback_host(host):
        return None
    return (
        f"{url!r} is plain http:// to another machine, which would send the API key unencrypted; "
        "use https:// (plain http:// is only for 127.0.0.1, localhost or [::1])"
    )


def auth_path(auth_dir: Path) -> Path:
    return auth_dir / AUTH_FILE


def saved_auth_env(auth_dir: Path) -> dict[str, str]:
    """Server URL and key saved by the CLI, as environment variables; {} when none is saved."""
    path = auth_path(auth_dir)
    try:
        raw = strict_json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read saved auth: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: saved auth must be a JSON object")
    env: dict[str, str] = {}
    for name, keys in ALIASES.items():
        for key in keys:
            if isinstance(raw.get(key), str) and raw[key]:
                env[name] = raw[key]
                break
    refusal = plain_http_refusal(env.get(URL_ENV, ""))
    if refusal is not None:  # written by hand or by an older version: never hand the key on
        raise ConfigError(f"{path}: the saved server URL {refusal}; run steamharness login again")
    return env


def save_auth(auth_dir: Path, *, server_url: str, api_key: str) -> Path:
    """Write the file (mode 0600) next to where it goes, then rename it into place: a reader
    sees the old file or the new one, never part of one. The auth dir is made if missing."""
    path = auth_path(auth_dir)
    refusal = plain_http_refusal(server_url)
    if refusal is not None:
        raise ConfigError(f"SERVER_URL {refusal}")
    body = json.dumps({"serverUrl": server_url, "apiKey": api_key}, indent=2) + "\n"
    if auth_dir.exists() and not auth_dir.is_dir():
        raise ConfigError(f"the auth dir {auth_dir} is not a folder")
    try:
        auth_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{AUTH_FILE}.", dir=auth_dir)  # mkstemp: mode 0600
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
    return path


def remove_auth(auth_dir: Path) -> str | None:
    """Remove the saved login; the server URL it named ("" if unreadable), None if there was none."""
    path = auth_path(auth_dir)
    try:
        url = saved_auth_env(auth_dir).get(URL_ENV, "")
    except ConfigError:
        url = ""
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot remove {path}: {exc.strerror or exc}") from None
    return url
