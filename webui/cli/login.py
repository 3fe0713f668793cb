"""`steamharness login SERVER_URL`: check a key against a server and save both for handlers.

The key is read from stdin (a prompt without echo on a terminal), never from the command
line, where other users could see it. It is checked with `GET /api/whoami`; only a key the
server accepts is saved, to `workflow-auth.json` in the auth dir (see webui.auth.saved),
which `steamharness mcp` hands to workflow handlers as STEAMHARNESS_SERVER_URL and
STEAMHARNESS_SERVER_ADMIN_KEY. Plain http:// is refused except to this machine (loopback):
the key would cross the network unencrypted."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from webui.auth.saved import plain_http_refusal, save_auth
from webui.cli.common import DataDirOpt, absolute, echo, load_settings, setting_help
from webui.errors import ConfigError, KeyRefused, ServerUnreachable

CHECK_TIMEOUT_SECONDS = 15.0

AuthDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--auth-dir",
        help=setting_help("Where workflow-auth.json is kept (default: the data dir).", "auth_dir"),
        show_default=False,
    ),
]


def auth_dir_of(data_dir: Path | None, auth_dir: Path | None) -> Path:
    """The auth dir the options (or their settings) name; both folders must be absolute."""
    settings = load_settings({"data_dir": data_dir, "auth_dir": auth_dir}, admin_key=False)
    absolute("--data-dir", settings.data_dir)
    absolute("--auth-dir", settings.auth_dir)
    return settings.resolved_auth_dir


def server_url(value: str) -> str:
    """An http(s) URL with a host, no credentials, query or fragment; without a trailing /."""
    url = value.strip()
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a port out of range raises here
    except ValueError:
        raise ConfigError(f"SERVER_URL {value!r} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(f"SERVER_URL must be an http:// or https:// URL with a host, got {value!r}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("SERVER_URL must not carry a user or password; the key is read from stdin")
    if parts.query or parts.fragment:
        raise ConfigError(f"SERVER_URL must not have a query or fragment, got {value!r}")
    refusal = plain_http_refusal(url)
    if refusal is not None:  # refused before the key is read, let alone sent
        raise ConfigError(f"SERVER_URL {refusal}")
    return url.rstrip("/")


def read_key() -> str:
    raw = getpass.getpass("API key (not shown): ") if sys.stdin.isatty() else sys.stdin.read()
    key = raw.strip()
    if not key:
        raise ConfigError("no key on stdin: pipe the API key in, e.g. steamharness login URL < key.txt")
    if any(ch.isspace() for ch in key):
        raise ConfigError("stdin must hold the API key alone, on one line")
    return key


def _refusal(response: Any) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f": {message}" if isinstance(message, str) and message else ""


def check_key(url: str, key: str) -> dict[str, Any]:
    """Who the server says the key is; `KeyRefused` or `ServerUnreachable` otherwise."""
    import httpx2

    whoami = f"{url}/api/whoami"
    try:
        response = httpx2.get(
            whoami,
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
            timeout=CHECK_TIMEOUT_SECONDS,
            follow_redirects=False,
            # Plain http:// is allowed to loopback only, and must stay there: a proxy from
            # the environment (HTTP_PROXY, ALL_PROXY) would receive the key in clear.
            trust_env=urlsplit(url).scheme != "http",
        )
    except httpx2.HTTPError as exc:
        raise ServerUnreachable(f"cannot reach {url}: {exc or type(exc).__name__}") from None
    status = response.status_code
    if status == 401:
        raise KeyRefused(f"{url} refused the key (HTTP 401){_refusal(response)}; nothing was saved")
    if status == 429:
        raise KeyRefused(
            f"{url} is refusing keys from this address for now (too many failed attempts, HTTP 429);"
            " try again later; nothing was saved"
        )
    if status != 200:
        raise ServerUnreachable(
            f"{whoami} answered HTTP {status}{_refusal(response)}, not like a steamharness server;"
            " nothing was saved"
        )
    try:
        data = response.json()["data"]
        actor = str(data["actor"])
    except (ValueError, KeyError, TypeError):
        raise ServerUnreachable(
            f"{whoami} did not answer like a steamharness server; nothing was saved"
        ) from None
    return {**data, "actor": actor}


def login_command(
    url: Annotated[str, typer.Argument(metavar="SERVER_URL", help="The server, e.g. https://sh.example.org")],
    auth_dir: AuthDirOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Check an API key (read from stdin) against a server and save both for workflow handlers."""
    base = server_url(url)
    folder = auth_dir_of(data_dir, auth_dir)
    key = read_key()
    who = check_key(base, key)
    path = save_auth(folder, server_url=base, api_key=key)
    echo(f"logged in to {base} as {who['actor']}; saved to {path}")
