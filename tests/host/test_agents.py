"""Agent files under agents/: shapes, server references, duplicates, and the selection they give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.test_config import Files, load, problems, write
from webui.errors import ConfigError
from webui.host.config import AgentConfig, HostConfigError, load_host_config

SERVERS: Files = {
    "mcp/servers.json": {"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}},
    "config.yaml": "defaults: {mcp_servers: [mcp-a]}\n",
}


def agent(body: str, name: str = "agents/one.yaml") -> Files:
    return SERVERS | {name: body}


def test_null_a_missing_field_empty_and_a_list_give_the_defaults_none_or_those_servers(
    tmp_path: Path,
) -> None:
    config = load(
        tmp_path,
        SERVERS
        | {
            "agents/inherit.yaml": "kind: agent\nid: agent-inherit\nname: Inherits\nmcp_servers: null\n",
            "agents/implicit.yml": "kind: agent\nid: agent-implicit\nname: Implicit\n",
            "agents/none.yaml": "kind: agent\nid: agent-none\nname: None\nmcp_servers: []\n",
            "agents/both.yaml": 'schema_version: "1"\nkind: agent\nid: agent-both\nname: Both\n'
            "mcp_servers: [mcp-b, mcp-a]\n",
            "agents/.hidden.yaml": "not: [an agent",
            "agents/notes.txt": "ignored",
        },
    )
    assert sorted(config.agents) == ["agent-both", "agent-implicit", "agent-inherit", "agent-none"]
    both = config.agents["agent-both"]
    assert both == AgentConfig(
        id="agent-both", name="Both", source=config.root / "agents/both.yaml", mcp_servers=("mcp-b", "mcp-a")
    )
    assert config.agents["agent-inherit"].mcp_servers is None
    assert config.agents["agent-implicit"].mcp_servers is None
    assert config.agents["agent-none"].mcp_servers == ()
    assert config.agent_selection("agent-inherit") == ["mcp-a"]
    assert config.agent_selection("agent-implicit") == ["mcp-a"]
    assert config.agent_selection("agent-none") == []
    assert config.agent_selection("agent-both") == ["mcp-b", "mcp-a"]
    with pytest.raises(ConfigError, match="no configured agent has id 'agent-nope'"):
        config.agent_selection("agent-nope")


def test_a_root_without_agents_has_none(tmp_path: Path) -> None:
    assert load(tmp_path, SERVERS).agents == {}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "kind: agent\nid: agent-one\nname: One\nmcp_servers: [mcp-a]\nmodel: gpt\n",
            [
                "agents/one.yaml: agent-one: model: unknown field (allowed: schema_version, kind, id, name,"
                " mcp_servers)"
            ],
        ),
        ("id: agent-one\nname: One\n", ["agents/one.yaml: agent-one: missing required field 'kind'"]),
        ("kind: agent\nname: One\n", ["agents/one.yaml: missing required field 'id'"]),
        ("kind: agent\nid: agent-one\n", ["agents/one.yaml: agent-one: missing required field 'name'"]),
        (
            "kind: mcp_server\nid: agent-one\nname: One\n",
            ["agents/one.yaml: agent-one: kind: must be agent, not 'mcp_server'"],
        ),
        (
            "schema_version: 1\nkind: agent\nid: agent-one\nname: One\n",
            ['agents/one.yaml: agent-one: schema_version: must be the string "1" (quoted), not 1'],
        ),
        (
            "kind: agent\nid: Docs Helper\nname: One\n",
            [
                "agents/one.yaml: id: must be an agent- id: lowercase letters, digits and '-'"
                " (did you mean agent-docs-helper?)"
            ],
        ),
        (
            "kind: agent\nid: mcp-a\nname: One\n",
            [
                "agents/one.yaml: id: must be an agent- id: lowercase letters, digits and '-'"
                " (did you mean agent-mcp-a?)"
            ],
        ),
        (
            f"kind: agent\nid: agent-{'x' * 70}\nname: One\n",
            [f"agents/one.yaml: agent-{'x' * 70}: id: longer than 64 characters"],
        ),
        (
            "kind: agent\nid: agent-one\nname: '  '\n",
            ["agents/one.yaml: agent-one: name: must be a non-empty string"],
        ),
        (
            "kind: agent\nid: agent-one\nname: 7\n",
            ["agents/one.yaml: agent-one: name: must be a non-empty string"],
        ),
        (
            "kind: agent\nid: agent-one\nname: One\nmcp_servers: mcp-a\n",
            [
                "agents/one.yaml: agent-one: mcp_servers: must be a list of MCP server ids,"
                " null (the defaults) or [] (none), got a string"
            ],
        ),
        (
            "kind: agent\nid: agent-one\nname: One\nmcp_servers: {mcp-a: true}\n",
            [
                "agents/one.yaml: agent-one: mcp_servers: must be a list of MCP server ids,"
                " null (the defaults) or [] (none), got an object"
            ],
        ),
        (
            "kind: agent\nid: agent-one\nname: One\nmcp_servers: [mcp-a, 3, mcp-a, mcp-nope, B]\n",
            [
                "agents/one.yaml: agent-one: mcp_servers[1]: must be a server id string, got a number",
                "agents/one.yaml: agent-one: mcp_servers[2]: 'mcp-a' is listed twice",
                "agents/one.yaml: agent-one: mcp_servers[3]: no configured MCP server has id 'mcp-nope'",
                "agents/one.yaml: agent-one: mcp_servers[4]: no configured MCP server has id 'B'"
                " (did you mean mcp-b?)",
            ],
        ),
        ("- kind: agent\n", ["agents/one.yaml: expected a kind: agent resource, got a list"]),
        ("", ["agents/one.yaml: expected a kind: agent resource, got nothing"]),
        ("kind: agent\nkind: agent\n", None),  # a repeated key: the strict YAML reader's own message
    ],
)
def test_bad_agent_files_are_refused_with_file_agent_and_field(
    tmp_path: Path, body: str, expected: list[str] | None
) -> None:
    lines = problems(tmp_path, agent(body))
    if expected is None:
        assert len(lines) == 1 and lines[0].startswith("agents/one.yaml: "), lines
    else:
        assert lines == expected


def test_every_problem_of_an_agent_is_reported_in_field_order(tmp_path: Path) -> None:
    body = "mcp_servers: [mcp-zz]\nname: ''\nid: agent-one\nkind: bot\nextra: 1\n"
    assert problems(tmp_path, agent(body)) == [
        "agents/one.yaml: agent-one: extra: unknown field"
        " (allowed: schema_version, kind, id, name, mcp_servers)",
        "agents/one.yaml: agent-one: kind: must be agent, not 'bot'",
        "agents/one.yaml: agent-one: name: must be a non-empty string",
        "agents/one.yaml: agent-one: mcp_servers[0]: no configured MCP server has id 'mcp-zz'",
    ]


def test_duplicate_agent_ids_are_refused_naming_both_files(tmp_path: Path) -> None:
    files = SERVERS | {
        "agents/a.yaml": "kind: agent\nid: agent-x\nname: A\n",
        "agents/b.yml": "kind: agent\nid: agent-x\nname: B\nmcp_servers: []\n",
    }
    assert problems(tmp_path, files) == ["agents/b.yml: agent-x: duplicate id; also defined in agents/a.yaml"]


def test_json_agent_files_and_a_file_named_agents_are_refused(tmp_path: Path) -> None:
    files = SERVERS | {"agents/a.json": {"kind": "agent", "id": "agent-a", "name": "A"}}
    assert problems(tmp_path, files) == ["agents/a.json: agent files are YAML; write it as a .yaml file"]
    assert problems(tmp_path / "2", SERVERS | {"agents": "x"}) == ["agents: expected a folder of agent files"]


def test_a_reference_to_a_server_whose_own_file_is_broken_is_not_reported_twice(tmp_path: Path) -> None:
    files = {
        "mcp/servers.json": {"mcpServers": {"a": {"command": "x", "cwd": "/"}}},
        "agents/one.yaml": "kind: agent\nid: agent-one\nname: One\nmcp_servers: [mcp-a]\n",
    }
    lines = problems(tmp_path, files)
    assert len(lines) == 1 and lines[0].startswith("mcp/servers.json: mcp-a: cwd: "), lines


def test_problems_of_agents_and_servers_come_together(tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = agent("kind: agent\nid: agent-one\nname: One\nmcp_servers: [mcp-nope]\n") | {
        "config.yaml": "defaults: {mcp_servers: [mcp-gone]}\n"
    }

    with pytest.raises(HostConfigError) as caught:
        load_host_config(write(root, files))
    assert [p.replace(f"{root}/", "") for p in caught.value.problems] == [
        "config.yaml: defaults.mcp_servers[0]: no configured MCP server has id 'mcp-gone'",
        "agents/one.yaml: agent-one: mcp_servers[0]: no configured MCP server has id 'mcp-nope'",
    ]
