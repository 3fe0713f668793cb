"""The operator commands on a data dir, a server its data dir was prepared for by them, and
`serve --demo` from a fresh one."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from tests import prepared, processes
from tests.conftest import EXAMPLES
from tests.e2e.server import HELLO, STEAMHARNESS, free_port, make_server_via_cli
from tests.helpers import WAIT

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
INITIALIZE = {  # a 2025-11-25 client's first request
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def run(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    return processes.run(
        [STEAMHARNESS, *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        input=stdin,
        env=env,
    )


def test_projects_register_publish_and_go_offline_with_clear_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = run(data, "projects", "add", str(EXAMPLES / "hello"))
    again = run(data, "projects", "add", str(EXAMPLES / "hello"))
    assert first.returncode == again.returncode == 0
    assert first.stdout.strip() == again.stdout.strip() == HELLO
    assert "already registered" in again.stderr
    assert run(data, "projects", "publish", HELLO).stdout.strip() == "1.0.0"
    duplicate = run(data, "projects", "publish", HELLO)
    assert duplicate.returncode != 0 and "immutable" in duplicate.stderr and duplicate.stderr.count("\n") == 1
    assert run(data, "projects", "publish", HELLO, "--version", "1.1.0").returncode == 0
    bad = run(data, "projects", "publish", HELLO, "--version", "v2")
    assert bad.returncode != 0 and "1.2.3" in bad.stderr
    listed = json.loads(run(data, "projects", "list").stdout)
    assert listed[0]["latest"] == "1.1.0"
    assert run(data, "projects", "offline", HELLO, "1.1.0").returncode == 0
    assert json.loads(run(data, "projects", "list").stdout)[0]["latest"] == "1.0.0"
    missing = run(data, "projects", "offline", HELLO, "9.9.9")
    assert missing.returncode != 0 and "no version 9.9.9" in missing.stderr
    conversation = tmp_path / "conv"
    conversation.mkdir()
    (conversation / "package.json").write_text(
        json.dumps(
            {"id": "11111111-1111-4111-8111-111111111111", "name": "c", "projectType": "conversation"}
        ),
        encoding="utf-8",
    )
    refused = run(data, "projects", "add", str(conversation))
    assert refused.returncode != 0 and "not a workflow project" in refused.stderr


def test_users_and_keys_show_the_raw_key_once_and_never_list_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert (
        run(data, "users", "create", "ann", "--password-stdin", stdin="correct horse battery\n").returncode
        == 0
    )
    duplicate = run(data, "users", "create", "ann")
    assert duplicate.returncode != 0 and "already exists" in duplicate.stderr
    created = run(data, "keys", "create", "--user", "ann", "--scope", "runs.create", "--name", "laptop")
    raw = created.stdout.strip()
    assert created.stdout.count("\n") == 1 and raw.startswith("shk_")
    assert raw not in created.stderr
    listing = run(data, "keys", "list").stdout
    assert raw not in listing and raw.split("_", 2)[2] not in listing
    key_id = json.loads(listing)[0]["id"]
    assert run(data, "keys", "revoke", key_id).returncode == 0
    assert json.loads(run(data, "keys", "list").stdout)[0]["revokedAt"] is not None
    nobody = run(data, "keys", "create", "--user", "ghost")
    assert nobody.returncode != 0 and "does not exist" in nobody.stderr
    bad_scope = run(data, "keys", "create", "--user", "ann", "--scope", "admin.everything")
    assert bad_scope.returncode != 0 and "unknown scope" in bad_scope.stderr
    unknown_project = run(data, "keys", "create", "--user", "ann", "--project", "nope")
    assert unknown_project.returncode != 0 and "not registered" in unknown_project.stderr


def test_a_key_for_a_project_the_user_may_not_run_is_refused_until_granted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run(data, "projects", "add", str(EXAMPLES / "hello")).returncode == 0
    assert run(data, "users", "create", "bo").returncode == 0
    refused = run(data, "keys", "create", "--user", "bo", "--project", HELLO)
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"steamharness: error: user 'bo' has no run permission on project(s) hello ({HELLO}), so the key "
        "would be refused "
        f"there; grant it first: steamharness users grant bo --project {HELLO}"
    ]
    assert json.loads(run(data, "keys", "list").stdout) == []
    assert run(data, "users", "grant", "bo", "--project", HELLO).returncode == 0
    granted = run(data, "keys", "create", "--user", "bo", "--project", HELLO)
    assert granted.returncode == 0 and granted.stdout.strip().startswith("shk_")
    # Every project an administrator may use: nothing to grant.
    assert run(data, "users", "create", "root", "--admin").returncode == 0
    assert run(data, "keys", "create", "--user", "root", "--project", HELLO).returncode == 0
    # A key for "every project the account may run" needs no grant up front.
    assert run(data, "users", "create", "cy").returncode == 0
    assert run(data, "keys", "create", "--user", "cy").returncode == 0


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["bad name!"], None, "user name: Use 1–64 letters, digits and . _ - @"),
        (["x" * 65], None, "user name: Use 1–64 letters"),
        (["dan", "--password-stdin"], "short\n", "password: Use at least 8 characters"),
        (["dan", "--password-stdin"], "p" * 1025 + "\n", "password: Use at most 1024 characters."),
    ],
)
def test_a_bad_user_name_or_password_is_one_line_and_creates_nothing(
    tmp_path: Path, args: list[str], stdin: str | None, message: str
) -> None:
    data = tmp_path / "data"
    refused = run(data, "users", "create", *args, stdin=stdin)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("steamharness: error: ")
    assert message in refused.stderr
    missing = run(data, "keys", "create", "--user", args[0])
    assert missing.returncode != 0 and "does not exist" in missing.stderr


def test_the_data_dir_comes_from_its_setting_unless_the_option_is_given(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    env["STEAMHARNESS_DATA_DIR"] = str(tmp_path / "from-env")
    for extra in ([], ["--data-dir", str(tmp_path / "from-option")]):
        done = processes.run(
            [STEAMHARNESS, "projects", "add", str(EXAMPLES / "hello"), *extra],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
        )
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "from-env" / "steamharness.sqlite3").is_file()
    assert (tmp_path / "from-option" / "steamharness.sqlite3").is_file()


def test_the_options_name_the_settings_they_override_in_their_help() -> None:
    from typer.testing import CliRunner

    from webui.cli import app

    help_text = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    for name in ("HOST", "PORT", "DATA_DIR", "DATABASE_URL", "ROOT"):
        assert f"[env var: STEAMHARNESS_{name}]" in help_text, help_text
    assert "[default: 127.0.0.1]" in help_text and "[default: 8000]" in help_text


def test_the_demo_examples_come_from_the_examples_dir_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webui.cli.serve import examples_dir
    from webui.settings import Settings

    monkeypatch.setenv("STEAMHARNESS_EXAMPLES_DIR", str(tmp_path))
    assert examples_dir(Settings()) == tmp_path
    monkeypatch.delenv("STEAMHARNESS_EXAMPLES_DIR")
    assert examples_dir(Settings()) == EXAMPLES


def test_a_weak_admin_key_is_refused_before_the_server_starts(tmp_path: Path) -> None:
    env = {**os.environ, "STEAMHARNESS_SERVER_ADMIN_KEY": "changeme"}
    proc = processes.run(
        [STEAMHARNESS, "serve", "--data-dir", str(tmp_path), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "too weak" in proc.stderr


@pytest.mark.parametrize("args", [["--projects-dir", "/nonexistent/projects"]])
def test_serve_refuses_a_missing_projects_dir(tmp_path: Path, args: list[str]) -> None:
    proc = processes.run(
        [STEAMHARNESS, "serve", "--data-dir", str(tmp_path), "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode != 0 and "not a directory" in proc.stderr


# The whole path through real processes, as an operator runs it: thirteen commands and
# `serve`, each a process of its own, forked from the fork server (tests/processes.py). Run
# by exec, each would first import the whole stack (minutes for this one test on a loaded
# machine); the exec of the installed command and of `serve` is the next test's.
def test_a_server_whose_projects_and_key_were_made_by_the_commands_serves_every_published_one(
    tmp_path: Path,
) -> None:
    # The one live server prepared the way an operator does it (ten `projects add` / `publish`
    # commands, then `users create`, `users grant --all` and `keys create`); every other live
    # server starts from a copy of the prepared data dir or makes these writes in-process.
    server = make_server_via_cli(tmp_path)
    server.cli("users", "create", "ops")
    server.cli("users", "grant", "ops", "--all")
    key = server.cli("keys", "create", "--user", "ops").stdout.strip()
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    init = INITIALIZE
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    greet = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "ops"}},
    }
    with server.running():
        for project_id in prepared.PUBLISHED:
            url = server.mcp_url(project_id)
            opened = httpx2.post(url, json=init, headers=headers, timeout=TIMEOUT)
            assert opened.status_code == 200, opened.text
            assert f"workflow-{project_id}" in opened.text
            session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert httpx2.post(url, json=note, headers=session, timeout=TIMEOUT).status_code == 202
            tools = httpx2.post(url, json=listed, headers=session, timeout=TIMEOUT)
            assert tools.status_code == 200 and '"tools":[{' in tools.text.replace(" ", ""), tools.text
            if project_id == HELLO:
                called = httpx2.post(url, json=greet, headers=session, timeout=TIMEOUT)
                assert called.status_code == 200 and '"isError":false' in called.text.replace(" ", ""), (
                    called.text
                )


# The whole path through real processes, as an operator runs it (tests/processes.py).
@pytest.mark.exec_processes
def test_serve_demo_prints_a_ready_login_and_key_that_work(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}
    env["STEAMHARNESS_SERVER_ADMIN_KEY"] = secrets.token_urlsafe(32)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = processes.Popen(
            [STEAMHARNESS, "serve", "--demo", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            stdout=subprocess.PIPE,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + TIMEOUT
        while not any(line.startswith("demo API key:") for line in lines) and time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            if not line:
                break
            lines.append(line)
        key = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("demo API key:"))
        assert lines[0] == f"steamharness is running: open http://127.0.0.1:{port} in a browser\n"
        assert any(line.startswith("demo login: demo / ") for line in lines)
        url = f"http://127.0.0.1:{port}/api/workflows/{HELLO}/mcp?target=latest"
        body = INITIALIZE
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
        while True:
            try:
                response = httpx2.post(url, json=body, headers=headers, timeout=5)
                break
            except httpx2.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.05)  # the port is not listening yet; bounded by the deadline
        assert response.status_code == 200, response.text
        assert f"workflow-{HELLO}" in response.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
