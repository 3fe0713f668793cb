"""`steamharness login` / `logout` as real CLI processes against the real app on loopback (in
this process, tests/support/inprocess.py), and what a saved login gives the handlers of
`steamharness mcp`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests import processes
from tests.conftest import FIXTURES
from tests.e2e.server import STEAMHARNESS, LiveServer, free_port
from tests.helpers import WAIT
from tests.mcp.test_stdio_protocol import connect, payload
from tests.support.inprocess import in_process_server

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
SERVER_CLIENT = FIXTURES / "server_client"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    # The commands are the subject (real processes); the app in this process answers them.
    with in_process_server(tmp_path_factory.mktemp("login"), server_database_url) as live:
        yield live


def cli(
    *args: str, stdin: str | None = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    return processes.run(
        [STEAMHARNESS, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        env={**base, **(env or {})},
    )


def login(url: str, key: str, auth: Path, data: Path) -> subprocess.CompletedProcess[str]:
    return cli("login", url, "--auth-dir", str(auth), "--data-dir", str(data), stdin=f"{key}\n")


def logout(auth: Path, data: Path) -> subprocess.CompletedProcess[str]:
    return cli("logout", "--auth-dir", str(auth), "--data-dir", str(data))


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2 and proc.stdout == "", proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error: "), proc.stderr
    return lines[0]


@pytest.mark.dialects  # the server's key lookup for a login, on PostgreSQL too
def test_whoami_names_the_key_and_refuses_a_bad_one(server: LiveServer) -> None:
    key = server.create_key("wendy", scopes=["runs.read"])
    admin = httpx2.get(
        f"{server.base_url}/api/whoami", headers={"Authorization": f"Bearer {server.admin_key}"}
    )
    user = httpx2.get(f"{server.base_url}/api/whoami", headers={"Authorization": f"Bearer {key}"})
    bad = httpx2.get(f"{server.base_url}/api/whoami", headers={"Authorization": "Bearer shk_nope_nope"})
    assert admin.json()["data"] == {
        "kind": "admin",
        "actor": "admin",
        "keyId": None,
        "scopes": [],
        "projects": None,
    }
    assert user.json()["data"]["actor"] == "user:wendy"
    assert user.json()["data"]["scopes"] == ["runs.read"]
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthorized"
    assert "nope" not in json.dumps(user.json())


def test_login_saves_the_url_and_key_owner_only_and_logout_removes_them(
    server: LiveServer, tmp_path: Path
) -> None:
    auth, data = tmp_path / "auth", tmp_path / "data"
    done = login(f"{server.base_url}/", server.admin_key, auth, data)
    assert done.returncode == 0, done.stderr
    saved = auth / "workflow-auth.json"
    assert done.stdout.strip() == f"logged in to {server.base_url} as admin; saved to {saved}"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text(encoding="utf-8")) == {
        "serverUrl": server.base_url,
        "apiKey": server.admin_key,
    }
    assert [p.name for p in auth.iterdir()] == ["workflow-auth.json"]  # no temp file left
    assert server.admin_key not in done.stdout + done.stderr
    assert not data.exists()  # the auth dir was given: the data dir is not touched

    key = server.create_key("alice")
    again = login(server.base_url, key, auth, data)
    assert again.returncode == 0 and "as user:alice" in again.stdout
    assert json.loads(saved.read_text(encoding="utf-8"))["apiKey"] == key
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600

    out = logout(auth, data)
    assert out.returncode == 0 and out.stdout.strip() == f"logged out of {server.base_url}: removed {saved}"
    assert not saved.exists()
    none = logout(auth, data)
    assert none.returncode == 0 and none.stdout.strip() == f"not logged in: there is no {saved}"


def test_without_auth_dir_the_login_is_saved_in_the_data_dir(server: LiveServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = cli("login", server.base_url, "--data-dir", str(data), stdin=server.admin_key)
    assert done.returncode == 0, done.stderr
    assert (data / "workflow-auth.json").is_file()
    from_env = cli("logout", env={"STEAMHARNESS_DATA_DIR": str(data)})
    assert from_env.returncode == 0 and "removed" in from_env.stdout
    assert not (data / "workflow-auth.json").exists()


def test_a_refused_key_saves_nothing_and_keeps_the_login_there_was(
    server: LiveServer, tmp_path: Path
) -> None:
    auth, data = tmp_path / "auth", tmp_path / "data"
    assert login(server.base_url, server.admin_key, auth, data).returncode == 0
    before = (auth / "workflow-auth.json").read_bytes()
    line = one_error(login(server.base_url, "shk_wrong_wrong", auth, data))
    assert f"{server.base_url} refused the key (HTTP 401): invalid API key; nothing was saved" in line
    assert "shk_wrong_wrong" not in line
    assert (auth / "workflow-auth.json").read_bytes() == before
    assert [p.name for p in auth.iterdir()] == ["workflow-auth.json"]


def test_an_auth_dir_that_cannot_hold_the_file_is_one_line(server: LiveServer, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("a file", encoding="utf-8")
    line = one_error(login(server.base_url, server.admin_key, taken, tmp_path / "data"))
    assert f"the auth dir {taken} is not a folder" in line
    (tmp_path / "auth" / "workflow-auth.json").mkdir(parents=True)  # a folder where the file goes
    line = one_error(login(server.base_url, server.admin_key, tmp_path / "auth", tmp_path / "data"))
    assert f"cannot write {tmp_path / 'auth' / 'workflow-auth.json'}" in line
    assert sorted(p.name for p in (tmp_path / "auth").iterdir()) == ["workflow-auth.json"]  # no temp file
    assert taken.read_text(encoding="utf-8") == "a file"


def test_an_unreachable_server_saves_nothing(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    line = one_error(login(url, "shk_any_key", tmp_path / "auth", tmp_path / "data"))
    assert f"cannot reach {url}" in line
    assert not (tmp_path / "auth").exists()


def test_a_server_that_is_not_steamharness_saves_nothing(server: LiveServer, tmp_path: Path) -> None:
    line = one_error(login(f"{server.base_url}/static", server.admin_key, tmp_path / "auth", tmp_path / "d"))
    assert "answered HTTP 404" in line and "not like a steamharness server" in line
    assert not (tmp_path / "auth").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://127.0.0.1/", "must be an http:// or https:// URL with a host, got 'ftp://127.0.0.1/'"),
        ("127.0.0.1:8000", "must be an http:// or https:// URL with a host"),
        ("http://", "must be an http:// or https:// URL with a host"),
        ("http://me:pw@127.0.0.1", "must not carry a user or password"),
        ("http://127.0.0.1/?x=1", "must not have a query or fragment"),
        ("http://127.0.0.1:99999", "is not a valid URL"),
    ],
)
def test_a_bad_server_url_is_refused_before_the_key_is_read(tmp_path: Path, url: str, message: str) -> None:
    line = one_error(login(url, "shk_any_key", tmp_path / "auth", tmp_path / "data"))
    assert message in line
    assert not (tmp_path / "auth").exists()


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("", "no key on stdin"),
        ("  \n\n", "no key on stdin"),
        (None, "no key on stdin"),
        ("two words\n", "stdin must hold the API key alone, on one line"),
        ("first\nsecond\n", "stdin must hold the API key alone, on one line"),
    ],
)
def test_a_missing_or_malformed_key_on_stdin_is_refused(
    server: LiveServer, tmp_path: Path, stdin: str | None, message: str
) -> None:
    done = cli("login", server.base_url, "--auth-dir", str(tmp_path / "auth"), stdin=stdin)
    assert message in one_error(done)
    assert not (tmp_path / "auth").exists()


def test_the_key_is_never_taken_from_the_command_line(server: LiveServer, tmp_path: Path) -> None:
    # After `--`, so that a key starting with "-" (one in 64) is still an extra argument.
    done = cli("login", server.base_url, "--auth-dir", str(tmp_path / "auth"), "--", server.admin_key)
    assert done.returncode == 2 and "unexpected extra argument" in done.stderr.lower()
    assert not (tmp_path / "auth").exists()


@pytest.mark.parametrize("command", ["login", "logout"])
def test_relative_folders_are_refused(server: LiveServer, tmp_path: Path, command: str) -> None:
    args = [server.base_url] if command == "login" else []
    for option in ("--auth-dir", "--data-dir"):
        done = cli(command, *args, option, "rel", stdin=server.admin_key)
        assert f"{option} must be an absolute path, got 'rel'" in one_error(done)


@pytest.mark.dialects  # a saved login used end to end, on PostgreSQL too
@pytest.mark.anyio
async def test_mcp_handlers_reach_the_server_with_the_saved_login(server: LiveServer, tmp_path: Path) -> None:
    auth, data = tmp_path / "auth", tmp_path / "data"
    key = server.create_key("carol")
    assert login(server.base_url, key, auth, data).returncode == 0
    extra = ("--auth-dir", str(auth))
    async with connect(SERVER_CLIENT, tmp_path / "stdio", "legacy", *extra, env={}) as client:
        saved = payload(await client.call_tool("whoami", {}))["output"]
    elsewhere = f"http://127.0.0.1:{free_port()}"
    async with connect(
        SERVER_CLIENT, tmp_path / "stdio", "legacy", *extra, env={"STEAMHARNESS_SERVER_URL": elsewhere}
    ) as client:
        explicit = payload(await client.call_tool("whoami", {}))["output"]
    assert logout(auth, data).returncode == 0
    async with connect(SERVER_CLIENT, tmp_path / "stdio", "legacy", *extra, env={}) as client:
        gone = payload(await client.call_tool("whoami", {}))["output"]
    assert saved == {"serverUrl": server.base_url, "hasKey": True, "actor": "user:carol", "problem": None}
    # An explicit variable wins over the saved file; the saved key still comes along.
    assert explicit["serverUrl"] == elsewhere and explicit["hasKey"] and explicit["actor"] is None
    assert gone == {"serverUrl": None, "hasKey": False, "actor": None, "problem": "not configured"}


@pytest.mark.parametrize(
    "saved",
    [
        {"serverUrl": "https://a.example", "apiKey": "k1"},
        {"serverUrl": "https://a.example", "adminKey": "k1"},
        {"server_url": "https://a.example", "admin_key": "k1"},
        {"STEAMHARNESS_SERVER_URL": "https://a.example", "STEAMHARNESS_SERVER_ADMIN_KEY": "k1"},
    ],
)
def test_every_spelling_of_the_saved_file_is_read(tmp_path: Path, saved: dict[str, str]) -> None:
    from webui.auth.saved import saved_auth_env

    (tmp_path / "workflow-auth.json").write_text(json.dumps(saved), encoding="utf-8")
    assert saved_auth_env(tmp_path) == {
        "STEAMHARNESS_SERVER_URL": "https://a.example",
        "STEAMHARNESS_SERVER_ADMIN_KEY": "k1",
    }


def test_a_corrupt_saved_login_stops_mcp_in_one_line_and_logout_still_removes_it(tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    auth.mkdir()
    (auth / "workflow-auth.json").write_text("{not json", encoding="utf-8")
    done = cli(
        "mcp", str(SERVER_CLIENT), "--data-dir", str(tmp_path / "d"), "--auth-dir", str(auth), stdin=None
    )
    line = one_error(done)
    assert f"{auth / 'workflow-auth.json'}: cannot read saved auth" in line
    out = logout(auth, tmp_path / "d")
    assert out.returncode == 0 and out.stdout.strip() == f"logged out: removed {auth / 'workflow-auth.json'}"
    assert not (auth / "workflow-auth.json").exists()
