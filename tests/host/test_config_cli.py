"""`steamharness host validate`: checks everything without connecting. The command runs in
this process (`tests/cli_runner.py`); a valid and a missing root go through a real process."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests import processes
from tests.cli_runner import run_cli
from tests.helpers import WAIT

STEAMHARNESS = processes.STEAMHARNESS
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
PREFIX = "steamharness: error: "


def validate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`steamharness host validate ARGS` in this process (`tests/cli_runner.py`), this
    environment without its STEAMHARNESS_* settings, plus `env`."""
    return run_cli(["host", "validate", *args], env=clean_env() | (env or {}))


def validate_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The same command as a real process."""
    return processes.run(
        [STEAMHARNESS, "host", "validate", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=clean_env() | (env or {}),
    )


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}


def make_root(root: Path, servers: Mapping[str, object], config: str = "") -> Path:
    (root / "mcp").mkdir(parents=True)
    (root / "mcp/servers.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    if config:
        (root / "config.yaml").write_text(config, encoding="utf-8")
    return root


GOOD = {
    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/w"]},
    "docs": {"url": "https://mcp.example.com/mcp", "headers": {"X-Workspace": "${WORKSPACE_ID}"}},
}


def test_a_valid_root_exits_zero_with_one_success_line_on_stderr(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD, "defaults: {mcp_servers: [mcp-fs]}\n")
    done = validate_process("--root", str(root), env={"WORKSPACE_ID": "ws"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == f"steamharness: config ok: 2 MCP server(s) in {root}; defaults: mcp-fs\n"


def test_an_invalid_root_prints_one_line_per_problem_and_exits_non_zero(tmp_path: Path) -> None:
    servers = GOOD | {"bad": {"type": "sse", "url": "http://mcp.example.com/sse", "alwaysAllow": ["x"]}}
    root = make_root(tmp_path / "root", servers, "defaults: {mcp_servers: [mcp-nope]}\n")
    done = validate("--root", str(root), "--check-env")
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert all(line.startswith(PREFIX) for line in lines), lines
    assert [line.removeprefix(PREFIX).replace(f"{root}/", "") for line in lines] == [
        "mcp/servers.json: mcp-bad: alwaysAllow: unknown field (client-specific fields are not supported;"
        " allowed: type, command, args, env, url, headers)",
        "mcp/servers.json: mcp-bad: type: legacy SSE is not supported; remote servers use Streamable HTTP"
        " (type: http or streamable-http, url of the Streamable HTTP endpoint)",
        "mcp/servers.json: mcp-bad: url: plain http is allowed only for a literal loopback host"
        " (127.0.0.0/8, ::1, localhost); use https",
        "mcp/servers.json: mcp-docs: headers.X-Workspace: environment variable WORKSPACE_ID is not set in"
        " the host process (references need a non-empty value)",
        "config.yaml: defaults.mcp_servers[0]: no configured MCP server has id 'mcp-nope'",
    ]
    assert "Traceback" not in done.stderr


def test_an_empty_variable_is_an_error_with_check_env(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD)
    done = validate("--root", str(root), "--check-env", env={"WORKSPACE_ID": ""})
    assert done.returncode == 1
    assert "environment variable WORKSPACE_ID is empty in the host process" in done.stderr


def test_an_unset_or_empty_variable_is_only_a_warning_by_default(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD)
    for env in ({}, {"WORKSPACE_ID": ""}):
        done = validate("--root", str(root), env=env)
        assert done.returncode == 0, done.stderr
        state = "empty" if env else "not set"
        assert done.stderr.splitlines() == [
            f"steamharness: warning: {root}/mcp/servers.json: mcp-docs: headers.X-Workspace: environment"
            f" variable WORKSPACE_ID is {state} in the host process (references need a non-empty value)",
            f"steamharness: config ok: 2 MCP server(s) in {root}; defaults: none"
            " (1 warning(s); --check-env makes them errors)",
        ]


def test_other_problems_still_fail_without_check_env(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD, "defaults: {mcp_servers: [mcp-nope]}\n")
    done = validate("--root", str(root))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"steamharness: error: {root}/config.yaml: defaults.mcp_servers[0]:"
        " no configured MCP server has id 'mcp-nope'"
    ]


def test_with_the_variable_set_check_env_passes(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD)
    done = validate("--root", str(root), "--check-env", env={"WORKSPACE_ID": "ws"})
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr


def test_the_root_comes_from_steamharness_root_then_the_data_dir(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", {"fs": {"command": "npx"}})
    data = make_root(tmp_path / "data", {"a": {"command": "x"}, "b": {"command": "y"}})
    by_root = validate(env={"STEAMHARNESS_ROOT": str(root), "STEAMHARNESS_DATA_DIR": str(data)})
    by_data_dir = validate(env={"STEAMHARNESS_DATA_DIR": str(data)})
    assert by_root.returncode == by_data_dir.returncode == 0
    assert f"1 MCP server(s) in {root};" in by_root.stderr
    assert f"2 MCP server(s) in {data};" in by_data_dir.stderr


def test_the_default_root_is_the_data_dir_under_home(tmp_path: Path) -> None:
    make_root(tmp_path / ".steamharness", {"fs": {"command": "npx"}})
    done = validate(env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert f"in {tmp_path / '.steamharness'};" in done.stderr


def test_a_missing_root_is_one_clear_line(tmp_path: Path) -> None:
    done = validate_process("--root", str(tmp_path / "nope"))
    assert done.returncode == 1
    assert (
        done.stderr
        == f"{PREFIX}{tmp_path / 'nope'}: the root config folder does not exist or is not a directory\n"
    )


def test_host_validate_has_help() -> None:
    done = validate("--help")
    assert done.returncode == 0 and "--root" in done.stdout and "STEAMHARNESS_ROOT" in done.stdout
    assert "--check-env" in done.stdout


# ------------------------------------------------------------------------------ agents


def test_valid_agents_are_counted_in_the_success_line(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD, "defaults: {mcp_servers: [mcp-fs]}\n")
    (root / "agents").mkdir()
    (root / "agents/docs.yaml").write_text(
        "kind: agent\nid: agent-docs\nname: Docs\nmcp_servers: [mcp-docs]\n"
    )
    (root / "agents/plain.yml").write_text("kind: agent\nid: agent-plain\nname: Plain\nmcp_servers: null\n")
    done = validate("--root", str(root), env={"WORKSPACE_ID": "ws"})
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr == f"steamharness: config ok: 2 MCP server(s) in {root}; defaults: mcp-fs; 2 agent(s)\n"
    )


def test_bad_agents_and_unknown_server_ids_fail_validation_one_line_each(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD)
    (root / "agents").mkdir()
    (root / "agents/a.yaml").write_text(
        "kind: agent\nid: agent-a\nname: A\nmcp_servers: [mcp-docs, mcp-nope]\n"
    )
    (root / "agents/b.yaml").write_text("kind: agent\nid: agent-a\nname: B\nmcp_servers: []\ntools: [x]\n")
    (root / "agents/c.yaml").write_text("kind: agent\nid: agent-c\nname: C\nmcp_servers: mcp-fs\n")
    done = validate("--root", str(root), env={"WORKSPACE_ID": "ws"})
    assert done.returncode == 1 and done.stdout == ""
    assert [line.removeprefix(PREFIX).replace(f"{root}/", "") for line in done.stderr.splitlines()] == [
        "agents/a.yaml: agent-a: mcp_servers[1]: no configured MCP server has id 'mcp-nope'",
        "agents/b.yaml: agent-a: tools: unknown field (allowed: schema_version, kind, id, name, mcp_servers)",
        "agents/b.yaml: agent-a: duplicate id; also defined in agents/a.yaml",
        "agents/c.yaml: agent-c: mcp_servers: must be a list of MCP server ids, null (the defaults) or []"
        " (none), got a string",
    ]


# ------------------------------------------------------------------------------ the old name

MOVED = "steamharness: warning: `steamharness config` is now `steamharness host`\n"


def commands_in_help(text: str) -> list[str]:
    """The command names of a `--help` screen's commands table (one per row's first cell)."""
    return re.findall(r"^│ ([a-z][a-z-]*)\s", text, flags=re.MULTILINE)


def test_config_still_validates_and_says_its_new_name_on_stderr(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", GOOD, "defaults: {mcp_servers: [mcp-fs]}\n")
    env = clean_env() | {"WORKSPACE_ID": "ws"}
    done = run_cli(["config", "validate", "--root", str(root)], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == f"{MOVED}steamharness: config ok: 2 MCP server(s) in {root}; defaults: mcp-fs\n"
    # and fails as `host validate` does, with the same one-line errors
    missing = run_cli(["config", "validate", "--root", str(tmp_path / "nope")], env=env)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith(MOVED)
    assert missing.stderr.removeprefix(MOVED) == validate("--root", str(tmp_path / "nope")).stderr


def test_help_lists_host_and_hides_config() -> None:
    done = run_cli(["--help"], env=clean_env())
    assert done.returncode == 0, done.stderr
    names = commands_in_help(done.stdout)
    assert "host" in names and "configs" in names, done.stdout
    assert "config" not in names
    # asked for by name, the alias says what it is now
    alias = run_cli(["config", "--help"], env=clean_env())
    assert alias.returncode == 0 and "`steamharness config` is now `steamharness host`" in alias.stdout
