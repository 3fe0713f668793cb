"""The host's stdio MCP servers, when the server runs as root, run as the unprivileged
user (no groups, no way back up), in a home of their own, and cannot read the database;
nothing a server file puts in their environment reaches the root-owned launcher. Real
server processes, started by the host service the app builds."""

from __future__ import annotations

import errno
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import processes
from tests.conftest import FIXTURES
from tests.e2e.server import STEAMHARNESS
from tests.helpers import WAIT, needs_root
from webui.admin import create_user
from webui.audit.log import AuditLog
from webui.events import EventHub
from webui.host.config import HostConfigError
from webui.host.connection import HostError
from webui.host.service import HostService
from webui.interactions.service import InteractionService
from webui.runs.isolation import worker_user
from webui.settings import Settings
from webui.store.db import make_engine, private_dir

pytestmark = [
    pytest.mark.anyio,
    needs_root,
]

NOBODY = pwd.getpwnam("nobody")
# An interpreter the unprivileged user can run (this test's may live under a private home),
# with the SDK from this environment's site-packages.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "/usr/bin/python3"
SITE = sysconfig.get_paths()["purelib"]


@pytest.fixture
def base() -> Iterator[Path]:
    # Not under pytest's private tmp dir: the data dir's own mode must be what keeps the
    # server out, not a parent's.
    path = Path(tempfile.mkdtemp(prefix="sh-host-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def host_service(base: Path, servers: dict[str, Any], run_as: Any) -> tuple[HostService, int]:
    root = base / "root"
    (root / "mcp").mkdir(parents=True)
    (root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    (root / "config.yaml").write_text("defaults:\n  mcp_servers: [mcp-probe]\n", encoding="utf-8")
    private_dir(base / "data")
    engine = make_engine(f"sqlite:///{base / 'data' / 'steamharness.sqlite3'}")
    account = create_user(engine, name="ann", admin=True, password=None)
    assert account.id is not None
    service = HostService(
        root=root,
        engine=engine,
        interactions=InteractionService(engine, AuditLog(), EventHub()),
        audit=AuditLog(),
        expiry_seconds=60,
        log_dir=base / "data" / "logs",
        run_as=run_as,
    )
    return service, account.id


def probe_server(base: Path, **env: str) -> dict[str, Any]:
    # Readable by the unprivileged user: a copy of the test server outside any private dir.
    script = base / "host_server.py"
    shutil.copyfile(FIXTURES / "host_server.py", script)
    os.chmod(script, 0o644)
    return {
        "Probe": {
            "command": SYSTEM_PYTHON,
            "args": [str(script), "stdio"],
            "env": {"PYTHONPATH": SITE, "HOST_TEST_READ": str(base / "data" / "steamharness.sqlite3"), **env},
        }
    }


async def whoami(service: HostService, account_id: int) -> dict[str, Any]:
    async with service.running():
        conv = service.create_conversation(account_id=account_id, title="t", selection=None, actor="a")
        row = await service.call_tool(conv.id, "mcp-probe", "whoami", {}, actor="a")
    assert row.status == "success", (row.status, row.error)
    assert row.result is not None
    return json.loads(row.result["content"][0]["text"])


def test_the_app_runs_host_stdio_servers_as_the_worker_user_unless_told_otherwise() -> None:
    settings = Settings()
    assert settings.resolved_host_server_user == "nobody"
    assert Settings(worker_user="nobody", host_server_user="").resolved_host_server_user == ""
    user = worker_user(settings.resolved_host_server_user)
    assert user is not None and user.uid == NOBODY.pw_uid


async def test_a_stdio_server_runs_unprivileged_and_cannot_read_the_database(base: Path) -> None:
    service, account = host_service(base, probe_server(base), worker_user("nobody"))
    out = await whoami(service, account)
    assert out["uid"] == [NOBODY.pw_uid] * 3
    assert out["gid"] == [NOBODY.pw_gid] * 3
    assert out["groups"] == []
    assert out["read"] == errno.EACCES  # the database file: the server's alone
    home = Path(out["home"])
    assert not home.exists()  # removed with the host service
    assert stat.S_IMODE((base / "data").stat().st_mode) == 0o700


async def test_a_server_files_loader_variables_never_reach_the_root_launcher(base: Path) -> None:
    marker = base / "ran-as-root"
    hook = base / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        f"import os\nif os.geteuid() == 0:\n    open({str(marker)!r}, 'w').close()\n", encoding="utf-8"
    )
    servers = probe_server(base, PYTHONPATH=f"{hook}:{SITE}", PYTHONSTARTUP=str(hook / "sitecustomize.py"))
    service, account = host_service(base, servers, worker_user("nobody"))
    out = await whoami(service, account)
    assert out["uid"] == [NOBODY.pw_uid] * 3
    assert not marker.exists()  # the launcher ignored them; the server itself got them as nobody


# ------------------------------------------------------------ ${NAME} of the server's own


def validate(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base_env = {k: v for k, v in os.environ.items() if not k.upper().startswith("STEAMHARNESS_")}
    return processes.run(
        [STEAMHARNESS, "host", "validate", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env={**base_env, **env},
    )


def write_root(root: Path, servers: dict[str, Any], *, yaml: str | None = None) -> None:
    (root / "mcp").mkdir(parents=True, exist_ok=True)
    (root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    if yaml is not None:
        (root / "mcp" / "more.yaml").write_text(yaml, encoding="utf-8")
    (root / "config.yaml").write_text("defaults:\n  mcp_servers: []\n", encoding="utf-8")


@pytest.mark.parametrize(
    "name", ["STEAMHARNESS_SERVER_ADMIN_KEY", "steamharness_secret_key", "STEAMHARNESS_X"]
)
def test_config_validate_refuses_a_reference_to_the_servers_own_settings(tmp_path: Path, name: str) -> None:
    write_root(tmp_path, {"S": {"command": "true", "env": {"TOKEN": f"Bearer ${{{name}}}"}}})
    out = validate(tmp_path)
    assert out.returncode == 1, out.stdout
    assert (
        f"env.TOKEN: ${{{name}}}: STEAMHARNESS_* variables are the server's own configuration" in out.stderr
    )


def test_config_validate_refuses_it_in_yaml_references_and_headers_too(tmp_path: Path) -> None:
    yaml = (
        "mcpServers:\n"
        "  Y:\n    command: 'true'\n    env:\n      DB: {env: STEAMHARNESS_DATABASE_URL}\n"
        "  W:\n    url: https://example.com/mcp\n"
        "    headers:\n      Authorization: 'Bearer ${STEAMHARNESS_SERVER_ADMIN_KEY}'\n"
    )
    write_root(tmp_path, {}, yaml=yaml)
    out = validate(tmp_path)
    assert out.returncode == 1
    assert "env.DB: ${STEAMHARNESS_DATABASE_URL}: STEAMHARNESS_*" in out.stderr
    assert "headers.Authorization: ${STEAMHARNESS_SERVER_ADMIN_KEY}: STEAMHARNESS_*" in out.stderr


def test_config_validate_with_check_env_refuses_a_variable_holding_a_server_secret(tmp_path: Path) -> None:
    admin = secrets.token_urlsafe(32)
    write_root(tmp_path, {"S": {"command": "true", "env": {"TOKEN": "${COPIED}"}}})
    env = {"STEAMHARNESS_SERVER_ADMIN_KEY": admin, "COPIED": admin}
    assert validate(tmp_path, **env).returncode == 0  # a warning: the server's environment decides
    out = validate(tmp_path, "--check-env", **env)
    assert out.returncode == 1
    assert "env.TOKEN: ${COPIED} holds the value of STEAMHARNESS_SERVER_ADMIN_KEY" in out.stderr
    assert admin not in out.stderr + out.stdout


async def test_connecting_refuses_a_reference_to_the_servers_settings(base: Path) -> None:
    service, account = host_service(base, probe_server(base), worker_user("nobody"))
    async with service.running():
        conv = service.create_conversation(account_id=account, title="t", selection=None, actor="a")
        # The file is edited afterwards: every connect reads it again.
        edited = probe_server(base, TOKEN="${STEAMHARNESS_SECRET_KEY}")
        (service.root / "mcp" / "servers.json").write_text(
            json.dumps({"mcpServers": edited}), encoding="utf-8"
        )
        with pytest.raises(HostConfigError) as caught:
            await service.call_tool(conv.id, "mcp-probe", "whoami", {}, actor="a")
    assert any("env.TOKEN: ${STEAMHARNESS_SECRET_KEY}: STEAMHARNESS_*" in p for p in caught.value.problems)


async def test_connecting_refuses_a_variable_that_holds_the_admin_key(base: Path) -> None:
    admin = secrets.token_urlsafe(32)
    servers = probe_server(base, TOKEN="${COPIED}")
    service, account = host_service(base, servers, worker_user("nobody"))
    service.environ = {**os.environ, "STEAMHARNESS_SERVER_ADMIN_KEY": admin, "COPIED": f"x{admin}"}
    async with service.running():
        conv = service.create_conversation(account_id=account, title="t", selection=None, actor="a")
        with pytest.raises(HostError) as caught:  # the connection failed, saying why
            await service.call_tool(conv.id, "mcp-probe", "whoami", {}, actor="a")
    assert "env.TOKEN: ${COPIED} holds the value of STEAMHARNESS_SERVER_ADMIN_KEY" in caught.value.message
    assert admin not in caught.value.message
