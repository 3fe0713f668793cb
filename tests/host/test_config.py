"""Host MCP server configuration."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from webui.errors import ConfigError
from webui.host.config import (
    Capture,
    HostConfig,
    HostConfigError,
    McpSourceChanged,
    ServerConfig,
    capture,
    check_capture,
    describe_command,
    load_host_config,
    normalise_id,
    parse_template,
    resolve_env,
    resolve_headers,
)

Files = dict[str, Any]

# The seed's examples, verbatim.
SEED_SERVERS_JSON = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/path/to/workspace"],
        },
        "docs": {
            "type": "http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer example-token", "X-Workspace": "${WORKSPACE_ID}"},
        },
    }
}
SEED_GITHUB_YAML = """
    schema_version: "1"
    kind: mcp_server
    id: mcp-github
    name: GitHub
    transport:
      command: npx
      arguments: ["-y", "@modelcontextprotocol/server-github"]
      environment:
        GITHUB_TOKEN:
          env: GITHUB_TOKEN
"""
SEED_DOCS_YAML = """
    schema_version: "1"
    kind: mcp_server
    id: mcp-docs
    name: Documentation service
    transport:
      url: https://mcp.example.com/mcp
      headers:
        Authorization:
          env: DOCS_MCP_AUTHORIZATION
"""


def write(root: Path, files: Files) -> Path:
    """Write `files` under root: dicts as JSON (for .json), strings dedented as they are."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
        else:
            path.write_text(json.dumps(content), encoding="utf-8")
    return root


def load(tmp_path: Path, files: Files, environ: dict[str, str] | None = None) -> HostConfig:
    return load_host_config(write(tmp_path / "root", files), environ)


def problems(tmp_path: Path, files: Files, environ: dict[str, str] | None = None) -> list[str]:
    root = tmp_path / "root"
    with pytest.raises(HostConfigError) as caught:
        load_host_config(write(root, files), environ)
    lines = [p.replace(f"{root}/", "") for p in caught.value.problems]
    assert all("\n" not in line for line in lines), lines
    return lines


def one_server(files: Files, tmp_path: Path, environ: dict[str, str] | None = None) -> ServerConfig:
    config = load(tmp_path, files, environ)
    assert len(config.servers) == 1, config.servers
    return next(iter(config.servers.values()))


def entry(**fields: Any) -> Files:
    return {"mcp/servers.json": {"mcpServers": {"svc": fields}}}


def yaml_entry(flow: str) -> Files:
    return {"mcp/s.yaml": f"mcpServers:\n  svc: {flow}\n"}


RESOURCE = {
    "schema_version": "1",
    "kind": "mcp_server",
    "id": "mcp-svc",
    "name": "S",
    "transport": {"command": "x"},
}


def resource(**changes: Any) -> Files:
    """A single-resource YAML file: RESOURCE with `changes` (None drops a field)."""
    data = {k: v for k, v in (RESOURCE | changes).items() if v is not None}
    return {"mcp/svc.yaml": yaml.safe_dump(data, sort_keys=False)}


# ------------------------------------------------------------------------------ good files


def test_the_seed_servers_json_registers_two_servers_with_normalised_ids(tmp_path: Path) -> None:
    config = load(tmp_path, {"mcp/servers.json": SEED_SERVERS_JSON})
    assert sorted(config.servers) == ["mcp-docs", "mcp-filesystem"]
    fs, docs = config.servers["mcp-filesystem"], config.servers["mcp-docs"]
    assert (fs.transport, fs.command, fs.name) == ("stdio", "npx", "filesystem")
    assert fs.args == ("-y", "@modelcontextprotocol/server-filesystem", "/path/to/workspace")
    assert (docs.transport, docs.url) == ("http", "https://mcp.example.com/mcp")
    assert [name for name, _ in docs.header_spec] == ["Authorization", "X-Workspace"]
    assert resolve_headers(docs, {"WORKSPACE_ID": "ws-1"}) == {
        "Authorization": "Bearer example-token",
        "X-Workspace": "ws-1",
    }
    assert fs.source == docs.source == tmp_path / "root/mcp/servers.json"
    assert config.default_servers == [] and config.host_owned == frozenset()


def test_the_seed_resource_files_load_with_env_references(tmp_path: Path) -> None:
    config = load(tmp_path, {"mcp/github.yaml": SEED_GITHUB_YAML, "mcp/docs.yaml": SEED_DOCS_YAML})
    github, docs = config.servers["mcp-github"], config.servers["mcp-docs"]
    assert (github.name, github.transport, github.command) == ("GitHub", "stdio", "npx")
    assert github.args == ("-y", "@modelcontextprotocol/server-github")
    assert resolve_env(github, {"GITHUB_TOKEN": "ghp_1"}) == {"GITHUB_TOKEN": "ghp_1"}
    assert (docs.name, docs.transport) == ("Documentation service", "http")
    assert resolve_headers(docs, {"DOCS_MCP_AUTHORIZATION": "Bearer t"}) == {"Authorization": "Bearer t"}


@pytest.mark.parametrize(
    "files",
    [
        pytest.param(
            {"mcp/servers.yaml": "mcpServers:\n  svc:\n    command: tool\n    env: {A: {env: A}}\n"},
            id="yaml-mcpServers-wrapper",
        ),
        pytest.param(
            {
                "mcp/svc.json": {
                    "schema_version": "1",
                    "kind": "mcp_server",
                    "id": "mcp-svc",
                    "name": "Service",
                    "transport": {"command": "tool", "environment": {"A": "${A}"}},
                }
            },
            id="json-single-resource",
        ),
        pytest.param(
            resource(name="Service", transport={"command": "tool", "environment": {"A": "${A}"}}),
            id="yaml-single-resource",
        ),
        pytest.param(
            {"mcp/svc.yml": "mcpServers:\n  svc: {command: tool, env: {A: '${A}'}}\n"}, id="yml-suffix"
        ),
        pytest.param(entry(type="stdio", command="tool", env={"A": "${A}"}), id="type-stdio"),
    ],
)
def test_every_format_gives_the_same_command_server(tmp_path: Path, files: Files) -> None:
    server = one_server(files, tmp_path)
    assert (server.id, server.transport, server.command) == ("mcp-svc", "stdio", "tool")
    assert resolve_env(server, {"A": "value"}) == {"A": "value"}


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"type": "http", "url": "https://h.example/mcp"}, "https://h.example/mcp"),
        ({"type": "streamable-http", "url": "https://h.example/mcp"}, "https://h.example/mcp"),
        ({"url": "https://h.example:8443/mcp?x=1"}, "https://h.example:8443/mcp?x=1"),
        ({"url": "http://127.0.0.1:8000/mcp"}, "http://127.0.0.1:8000/mcp"),
        ({"url": "http://127.9.8.7/mcp"}, "http://127.9.8.7/mcp"),
        ({"url": "http://[::1]:9000/mcp"}, "http://[::1]:9000/mcp"),
        ({"url": "http://localhost:9000/mcp", "headers": {}}, "http://localhost:9000/mcp"),
        ({"url": "HTTP://LocalHost/mcp"}, "HTTP://LocalHost/mcp"),
    ],
)
def test_remote_servers_take_https_or_loopback_http_without_headers(
    tmp_path: Path, fields: dict[str, Any], url: str
) -> None:
    server = one_server(entry(**fields), tmp_path)
    assert (server.transport, server.url, server.header_spec) == ("http", url, ())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("My_Server", "mcp-my-server"),
        ("filesystem", "mcp-filesystem"),
        ("mcp-docs", "mcp-docs"),
        ("MCP_Docs", "mcp-docs"),
        ("  Web  Search.v2 ", "mcp-web-search-v2"),
        ("mcp", "mcp-mcp"),
        ("___", ""),
    ],
)
def test_names_normalise_to_mcp_ids(name: str, expected: str) -> None:
    assert normalise_id(name) == expected


def test_a_wrapper_name_becomes_the_id_and_stays_the_display_name(tmp_path: Path) -> None:
    config = load(tmp_path, {"mcp/servers.json": {"mcpServers": {"My_Server": {"command": "tool"}}}})
    assert config.servers["mcp-my-server"].name == "My_Server"


@pytest.mark.parametrize(
    ("env", "environ", "expected"),
    [
        ({"E": ""}, {}, {"E": ""}),
        ({"S": "  padded\t "}, {}, {"S": "  padded\t "}),
        ({"P": "-----BEGIN-----\nabc\n-----END-----\n"}, {}, {"P": "-----BEGIN-----\nabc\n-----END-----\n"}),
        ({"AB": "${A}${B}"}, {"A": "${B}", "B": "b"}, {"AB": "${B}b"}),
        ({"T": "Bearer ${TOKEN}!"}, {"TOKEN": "t0k"}, {"T": "Bearer t0k!"}),
        ({"L": "$HOME and $ {X} and $"}, {}, {"L": "$HOME and $ {X} and $"}),
        ({"_x1": "${_x1}"}, {"_x1": " "}, {"_x1": " "}),
    ],
)
def test_env_values_keep_literals_and_expand_references_once(
    tmp_path: Path, env: dict[str, str], environ: dict[str, str], expected: dict[str, str]
) -> None:
    server = one_server(entry(command="tool", env=env), tmp_path, environ)
    assert resolve_env(server, environ) == expected


def test_header_values_keep_whitespace_and_take_yaml_env_references(tmp_path: Path) -> None:
    files = {
        "mcp/svc.yaml": """
            mcpServers:
              svc:
                url: https://h.example/mcp
                headers:
                  X-Empty: ""
                  X-Space: "  a b  "
                  Authorization: {env: AUTH}
                  X-Both: "${A}-${B}"
        """
    }
    environ = {"AUTH": "Bearer x", "A": "1", "B": "${A}"}
    server = one_server(files, tmp_path, environ)
    assert resolve_headers(server, environ) == {
        "X-Empty": "",
        "X-Space": "  a b  ",
        "Authorization": "Bearer x",
        "X-Both": "1-${A}",
    }


def test_dotfiles_other_suffixes_and_subfolders_in_mcp_are_ignored(tmp_path: Path) -> None:
    files: Files = {
        "mcp/.servers.json.swp": "not json",
        "mcp/README.md": "# notes",
        "mcp/old/servers.json": "{broken",
        "mcp/servers.json": {"mcpServers": {"a": {"command": "tool"}}},
    }
    assert list(load(tmp_path, files).servers) == ["mcp-a"]


def test_an_empty_root_has_no_servers_and_no_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, {})
    assert (config.servers, config.default_servers, config.host_owned) == ({}, [], frozenset())
    assert config.select(None) == []


def test_loading_without_an_environment_does_not_check_references(tmp_path: Path) -> None:
    server = one_server({"mcp/github.yaml": SEED_GITHUB_YAML}, tmp_path)
    with pytest.raises(ConfigError, match="GITHUB_TOKEN is not set"):
        resolve_env(server, {})


# ------------------------------------------------------------------------------ bad files

# Each row: (id, files, a fragment of the expected problem line, paths relative to the root).
# fmt: off
BAD_FILES = [
    # syntax: plain JSON only, strict YAML
    ("jsonc-line-comment", {"mcp/servers.json": '{\n  // c\n  "mcpServers": {}\n}'},
     "mcp/servers.json: line 2: JSONC comments/trailing commas are not supported"),
    ("jsonc-block-comment", {"mcp/servers.json": '{"mcpServers": /* c */ {}}'},
     "mcp/servers.json: line 1: JSONC comments/trailing commas are not supported"),
    ("trailing-comma", {"mcp/servers.json": '{"mcpServers": {\n"a": {"command": "x"},\n}}'},
     "mcp/servers.json: line 2: JSONC comments/trailing commas are not supported"),
    ("comment-text-in-a-string-is-not-jsonc", {"mcp/servers.json": '{"a": "//x" oops}'},
     "mcp/servers.json: invalid JSON at line 1 column"),
    ("json-duplicate-key", {"mcp/servers.json": '{"mcpServers": {"a": {"command": "x", "command": "y"}}}'},
     "mcp/servers.json: duplicate key 'command'"),
    ("json-nan", {"mcp/servers.json": '{"mcpServers": {"a": {"command": NaN}}}'},
     "mcp/servers.json: NaN is not valid JSON"),
    ("yaml-duplicate-key", {"mcp/s.yaml": "mcpServers:\n  a:\n    command: x\n    command: y\n"},
     "mcp/s.yaml: invalid YAML at line 4 column 5: duplicate key 'command'"),
    ("yaml-duplicate-server", {"mcp/s.yaml": "mcpServers:\n  a: {command: x}\n  a: {command: y}\n"},
     "mcp/s.yaml: invalid YAML at line 3 column 3: duplicate key 'a'"),
    ("yaml-syntax", {"mcp/s.yaml": "mcpServers: [\n"}, "mcp/s.yaml: invalid YAML at line"),
    ("yaml-two-documents", {"mcp/s.yaml": "a: 1\n---\nb: 2\n"}, "mcp/s.yaml: invalid YAML"),
    ("jsonc-file", {"mcp/servers.jsonc": "{}"}, "mcp/servers.jsonc: JSONC is not supported"),
    ("not-utf8", {"mcp/s.json": b'{"mcpServers": {"\xff": {}}}'}, "mcp/s.json: not UTF-8 text"),
    ("empty-yaml", {"mcp/s.yaml": ""}, "mcp/s.yaml: expected an mcpServers object or a kind: mcp_server"),
    ("top-level-list", {"mcp/s.json": []}, "mcp/s.json: expected an mcpServers object"),
    ("vscode-servers-key", {"mcp/s.json": {"servers": {}}},
     "'servers' key of other clients is not supported"),
    ("wrapper-extra-key", {"mcp/s.json": {"mcpServers": {}, "inputs": []}},
     "mcp/s.json: inputs: unknown field"),
    ("wrapper-not-object", {"mcp/s.json": {"mcpServers": []}}, "mcp/s.json: mcpServers: must be an object"),
    ("yaml-wrapper-null", {"mcp/s.yaml": "mcpServers:\n"}, "mcp/s.yaml: mcpServers: must be an object"),
    ("entry-not-object", {"mcp/s.json": {"mcpServers": {"a": "npx"}}},
     "mcp/s.json: mcp-a: must be an object"),
    ("mcp-is-a-file", {"mcp": "servers"}, "mcp: expected a folder of MCP server files"),
    # names
    ("name-without-id", {"mcp/s.json": {"mcpServers": {"___": {"command": "x"}}}},
     "mcp/s.json: mcpServers.'___': a server name must be ASCII with at least one letter or digit"),
    ("name-not-ascii", {"mcp/s.json": {"mcpServers": {"文档": {"command": "x"}}}},
     "a server name must be ASCII"),
    ("id-too-long", {"mcp/s.json": {"mcpServers": {"x" * 70: {"command": "x"}}}},
     "the id is longer than 64 characters"),
    # type
    ("type-sse", entry(type="sse", url="https://h.example/sse"),
     "mcp/servers.json: mcp-svc: type: legacy SSE is not supported; remote servers use Streamable HTTP"),
    ("type-unknown", entry(type="websocket", url="wss://h"),
     "mcp-svc: type: must be stdio, http or streamable-http"),
    ("type-stdio-with-url", entry(type="stdio", url="https://h.example"),
     "mcp-svc: type: stdio takes command"),
    ("type-not-a-string", entry(type=["stdio"], command="x"),
     "mcp-svc: type: must be stdio, http or streamable-http, not ['stdio']"),
    ("type-http-with-command", entry(type="http", command="x"),
     "mcp-svc: type: http/streamable-http takes url"),
    ("command-and-url", entry(command="x", url="https://h.example"), "mcp-svc: give either command"),
    ("neither", entry(args=["x"]), "mcp-svc: missing command (stdio server) or url"),
    # fields other clients use
    ("alwaysAllow", entry(command="x", alwaysAllow=["t"]),
     "mcp-svc: alwaysAllow: unknown field (client-specific fields are not supported; allowed: type, command"),
    ("autoApprove", entry(command="x", autoApprove=["t"]), "mcp-svc: autoApprove: unknown field"),
    ("timeout", entry(command="x", timeout=60), "mcp-svc: timeout: unknown field"),
    ("cwd", entry(command="x", cwd="/tmp"), "mcp-svc: cwd: unknown field"),
    ("description", entry(command="x", description="d"), "mcp-svc: description: unknown field"),
    ("serverUrl", entry(serverUrl="https://h.example"), "mcp-svc: serverUrl: unknown field (write url;"),
    ("wrapper-arguments", entry(command="x", arguments=[]),
     "arguments: unknown field (mcpServers entries write args"),
    ("disabled-true", entry(command="x", disabled=True),
     "mcp-svc: disabled: not supported: a server file only registers a server"),
    ("disabled-false", entry(command="x", disabled=False), "mcp-svc: disabled: not supported"),
    ("oauth", entry(url="https://h.example", oauth={"clientId": "c"}),
     "mcp-svc: oauth: OAuth login is not supported"),
    ("auth", entry(url="https://h.example", auth={}), "mcp-svc: auth: OAuth login is not supported"),
    ("clientId", entry(url="https://h.example", clientId="c"),
     "mcp-svc: clientId: OAuth login is not supported"),
    # command and args: literal, never expanded
    ("headers-on-command", entry(command="x", headers={"A": "b"}),
     "mcp-svc: headers: only for remote (url) servers"),
    ("env-on-url", entry(url="https://h.example", env={"A": "b"}),
     "mcp-svc: env: only for command (stdio) servers"),
    ("args-on-url", entry(url="https://h.example", args=[]),
     "mcp-svc: args: only for command (stdio) servers"),
    ("command-empty", entry(command=""), "mcp-svc: command: must be a non-empty string"),
    ("command-list", entry(command=["npx"]), "mcp-svc: command: must be a non-empty string, got a list"),
    ("command-with-args", entry(command="npx -y pkg"),
     "mcp-svc: command: one executable only; put its arguments in args"),
    ("command-reference", entry(command="${TOOL}"), "mcp-svc: command: ${NAME} is not expanded here"),
    ("args-not-list", entry(command="x", args="-y"),
     "mcp-svc: args: must be a list of strings, got a string"),
    ("args-number", yaml_entry("{command: x, args: [--port, 8080]}"),
     "mcp/s.yaml: mcp-svc: args[1]: must be a string (quote it), got a number"),
    ("args-reference", entry(command="x", args=["--dir", "${HOME}"]),
     "mcp-svc: args[1]: ${NAME} is not expanded"),
    # env values
    ("env-not-object", entry(command="x", env=["A=b"]), "mcp-svc: env: must be an object of name → value"),
    ("env-name-invalid", entry(command="x", env={"1X": "v"}),
     "mcp-svc: env.1X: not a valid environment variable name"),
    ("env-name-dash", entry(command="x", env={"A-B": "v"}),
     "mcp-svc: env.A-B: not a valid environment variable name"),
    ("env-number", yaml_entry("{command: x, env: {PORT: 8080}}"),
     "mcp/s.yaml: mcp-svc: env.PORT: must be a string (quote it; '' for empty), got a number"),
    ("env-null", yaml_entry("{command: x, env: {E: }}"), "env.E: must be a string"),
    ("env-yaml-bool", yaml_entry("{command: x, env: {DEBUG: yes}}"),
     "env.DEBUG: must be a string (quote it; '' for empty), got a boolean"),
    ("env-ref-object-in-json", entry(command="x", env={"T": {"env": "T"}}),
     'mcp-svc: env.T: {"env": NAME} references are for YAML files'),
    ("env-ref-object-bad-name", yaml_entry("{command: x, env: {T: {env: 1T}}}"),
     "env.T: a reference is {env: NAME}"),
    ("env-ref-object-extra-key", yaml_entry("{command: x, env: {T: {env: T, d: x}}}"),
     "env.T: a reference is {env: NAME}"),
    ("default-syntax", entry(command="x", env={"A": "${A:-x}"}),
     "env.A: '${A:-x}': default/alternative syntax is not supported"),
    ("default-syntax-no-colon", entry(command="x", env={"A": "${A-x}"}),
     "default/alternative syntax is not supported"),
    ("alternative-syntax", entry(command="x", env={"A": "${A:+x}"}),
     "default/alternative syntax is not supported"),
    ("empty-reference", entry(command="x", env={"A": "${}"}), "env.A: '${}' is not a variable reference"),
    ("nested-reference", entry(command="x", env={"A": "${${B}}"}),
     "env.A: '${${B}' is not a variable reference"),
    ("reference-with-space", entry(command="x", env={"A": "${A B}"}), "'${A B}' is not a variable reference"),
    ("command-substitution", entry(command="x", env={"A": "${$(id)}"}), "is not a variable reference"),
    ("unclosed-reference", entry(command="x", env={"A": "x${A"}), "env.A: unclosed '${'"),
    ("env-nul", entry(command="x", env={"A": "a\0b"}), "env.A: contains NUL"),
    # headers
    ("header-name-invalid", entry(url="https://h.example", headers={"X Bad": "v"}),
     "headers.X Bad: not a valid header name"),
    ("header-session-id", entry(url="https://h.example", headers={"Mcp-Session-Id": "s"}),
     "headers.Mcp-Session-Id: set by the MCP transport itself"),
    ("header-host", entry(url="https://h.example", headers={"Host": "evil"}),
     "headers.Host: set by the MCP transport"),
    ("header-content-type", entry(url="https://h.example", headers={"content-type": "x"}),
     "set by the MCP transport"),
    ("header-twice", entry(url="https://h.example", headers={"Authorization": "a", "authorization": "b"}),
     "headers.authorization: given twice (as 'Authorization'; header names are case-insensitive)"),
    ("header-crlf", entry(url="https://h.example", headers={"X": "a\r\nInjected: 1"}),
     "headers.X: the value contains a line break or NUL character"),
    ("header-number", yaml_entry("{url: 'https://h.example', headers: {X: 1}}"),
     "headers.X: must be a string"),
    # URLs
    ("http-remote", entry(url="http://mcp.example.com/mcp"),
     "mcp-svc: url: plain http is allowed only for a literal loopback host (127.0.0.0/8, ::1, localhost)"),
    ("http-private-ip", entry(url="http://10.0.0.5/mcp"),
     "plain http is allowed only for a literal loopback"),
    ("http-localhost-lookalike", entry(url="http://localhost.example.com/mcp"), "plain http is allowed only"),
    ("http-loopback-with-headers", entry(url="http://127.0.0.1:8000/mcp", headers={"X": "v"}),
     "mcp-svc: headers: plain http (loopback) must not carry headers; use https"),
    ("https-credentials", entry(url="https://user:pass@h.example/mcp"),
     "mcp-svc: url: must not contain credentials (user:password@); send them in headers"),
    ("http-loopback-credentials", entry(url="http://user:pass@127.0.0.1/mcp"),
     "must not contain credentials"),
    ("https-user-only", entry(url="https://token@h.example/mcp"), "must not contain credentials"),
    ("ws-scheme", entry(url="wss://h.example/mcp"), "mcp-svc: url: must be an https:// URL"),
    ("no-scheme", entry(url="h.example/mcp"), "mcp-svc: url: must be an https:// URL"),
    ("no-host", entry(url="https:///mcp"), "mcp-svc: url: has no host"),
    ("bad-port", entry(url="https://h.example:99999/mcp"), "mcp-svc: url: not a valid URL"),
    ("url-whitespace", entry(url="https://h.example/m cp"), "mcp-svc: url: must not contain whitespace"),
    ("url-reference", entry(url="https://${HOST}/mcp"), "mcp-svc: url: ${NAME} is not expanded here"),
    # the single-resource format
    ("schema-version-number", resource(schema_version=1),
     'mcp/svc.yaml: mcp-svc: schema_version: must be the string "1" (quoted), not 1'),
    ("kind-wrong", resource(kind="agent"), "mcp/svc.yaml: mcp-svc: kind: must be mcp_server, not 'agent'"),
    ("missing-name", resource(name=None), "mcp/svc.yaml: mcp-svc: missing required field 'name'"),
    ("blank-name", resource(name=" "), "mcp/svc.yaml: mcp-svc: name: must be a non-empty string"),
    ("missing-transport", resource(transport=None),
     "mcp/svc.yaml: mcp-svc: missing required field 'transport'"),
    ("missing-id", resource(id=None), "mcp/svc.yaml: missing required field 'id'"),
    ("id-not-normalised", resource(id="mcp-GitHub"),
     "mcp/svc.yaml: mcp-GitHub: id: must be a normalised mcp- id: lowercase letters, digits and '-'"
     " (did you mean mcp-github?)"),
    ("id-without-prefix", resource(id="github"), "(did you mean mcp-github?)"),
    ("transport-not-object", resource(transport="npx"), "mcp-svc: transport: must be an object"),
    ("resource-extra-field", resource(description="d"), "mcp-svc: description: unknown field"),
    ("resource-disabled", resource(disabled=True), "mcp-svc: disabled: not supported"),
    ("transport-args-alias", resource(transport={"command": "x", "args": ["a"]}),
     "mcp-svc: transport.args: unknown field (write arguments;"),
    ("transport-env-alias", resource(transport={"command": "x", "env": {"A": "b"}}),
     "transport.env: unknown field (write environment;"),
    ("transport-type", resource(transport={"type": "stdio", "command": "x"}),
     "transport.type: unknown field (the form follows"),
    ("transport-cwd", resource(transport={"command": "x", "cwd": "/"}),
     "mcp-svc: transport.cwd: unknown field"),
    ("transport-both-forms", resource(transport={"command": "x", "url": "https://h.example"}),
     "mcp-svc: give either command"),
    ("transport-headers-on-command", resource(transport={"command": "x", "headers": {"A": "b"}}),
     "mcp-svc: transport.headers: only for remote (url) servers"),
    ("transport-arguments-number", resource(transport={"command": "x", "arguments": [1]}),
     "mcp-svc: transport.arguments[0]: must be a string"),
    ("transport-environment-default", resource(transport={"command": "x", "environment": {"A": "${A:-d}"}}),
     "mcp-svc: transport.environment.A: '${A:-d}': default/alternative syntax"),
    ("transport-http-url", resource(transport={"url": "http://h.example/mcp"}),
     "mcp-svc: transport.url: plain http is allowed only"),
    ("transport-oauth", resource(transport={"url": "https://h.example", "oauth": {}}),
     "transport.oauth: OAuth login is not supported"),
]
# fmt: on


@pytest.mark.parametrize(("files", "expected"), [pytest.param(f, e, id=i) for i, f, e in BAD_FILES])
def test_bad_server_files_are_rejected_with_file_server_and_field(
    tmp_path: Path, files: Files, expected: str
) -> None:
    found = problems(tmp_path, files)
    assert any(expected in line for line in found), found


def test_all_problems_are_reported_not_only_the_first(tmp_path: Path) -> None:
    files: Files = {
        "mcp/a.json": {"mcpServers": {"a": {"command": "x", "alwaysAllow": []}}},
        "mcp/b.json": '{"mcpServers": {},}',
        "mcp/c.yaml": "mcpServers:\n  c: {url: 'http://h.example', timeout: 5}\n",
    }
    found = problems(tmp_path, files)
    assert [line.split(":")[0] for line in found] == ["mcp/a.json", "mcp/b.json", "mcp/c.yaml", "mcp/c.yaml"]


def test_problems_about_one_server_come_in_a_fixed_order(tmp_path: Path) -> None:
    files = entry(
        type="stdio",
        url="http://127.0.0.1/x",
        env={"A": "b"},
        args=[1],
        foo=1,
        disabled=True,
        headers={"X Y": "a", "Good": "b"},
    )
    assert [line.removeprefix("mcp/servers.json: mcp-svc: ") for line in problems(tmp_path, files)] == [
        "foo: unknown field (client-specific fields are not supported;"
        " allowed: type, command, args, env, url, headers)",
        "disabled: not supported: a server file only registers a server; to turn it off, leave its id out of"
        " defaults.mcp_servers (or delete the entry)",
        "type: stdio takes command, not url",
        "args: only for command (stdio) servers",
        "env: only for command (stdio) servers",
        "headers.X Y: not a valid header name",
        "headers: plain http (loopback) must not carry headers; use https to send headers",
    ]


def test_a_resource_reports_its_fields_before_its_transport(tmp_path: Path) -> None:
    files = resource(schema_version=1, kind="x", name=" ", transport={"command": "a b", "cwd": "/"}, extra=1)
    assert [line.removeprefix("mcp/svc.yaml: mcp-svc: ") for line in problems(tmp_path, files)] == [
        "extra: unknown field (client-specific fields are not supported; allowed: schema_version, kind, id,"
        " name, transport)",
        'schema_version: must be the string "1" (quoted), not 1',
        "kind: must be mcp_server, not 'x'",
        "name: must be a non-empty string",
        "transport.cwd: unknown field (client-specific fields are not supported; allowed: command, arguments,"
        " environment, url, headers)",
        "transport.command: one executable only; put its arguments in transport.arguments",
    ]


def test_a_server_with_a_sound_transport_is_still_checked_against_the_environment(tmp_path: Path) -> None:
    files = entry(command="x", env={"A": "${A}"}, timeout=5)
    assert problems(tmp_path / "entry", files, {}) == [
        "mcp/servers.json: mcp-svc: timeout: unknown field (client-specific fields are not supported;"
        " allowed: type, command, args, env, url, headers)",
        "mcp/servers.json: mcp-svc: env.A: environment variable A is not set in the host process"
        " (references need a non-empty value)",
    ]
    files = resource(name=" ", transport={"command": "x", "cwd": "/", "environment": {"A": "${A}"}})
    found = problems(tmp_path / "resource", files, {})
    assert [line.removeprefix("mcp/svc.yaml: mcp-svc: ") for line in found] == [
        "name: must be a non-empty string",
        "transport.cwd: unknown field (client-specific fields are not supported;"
        " allowed: command, arguments, environment, url, headers)",
        "transport.environment.A: environment variable A is not set in the host process"
        " (references need a non-empty value)",
    ]


def test_a_duplicate_id_across_files_names_both_files(tmp_path: Path) -> None:
    files: Files = {
        "mcp/servers.json": {"mcpServers": {"docs": {"url": "https://a.example/mcp"}}},
        "mcp/docs.yaml": SEED_DOCS_YAML,
    }
    assert problems(tmp_path, files) == [
        "mcp/servers.json: mcp-docs: duplicate id; also defined in mcp/docs.yaml"
    ]


def test_names_normalising_to_one_id_in_one_file_are_a_duplicate(tmp_path: Path) -> None:
    files: Files = {
        "mcp/s.json": {"mcpServers": {"My_Server": {"command": "a"}, "my-server": {"command": "b"}}}
    }
    assert problems(tmp_path, files) == [
        "mcp/s.json: mcp-my-server: duplicate id: 'My_Server' and 'my-server' both normalise to it"
    ]


def test_problems_never_show_literal_values(tmp_path: Path) -> None:
    files = entry(url="http://127.0.0.1/mcp", headers={"Authorization": "Bearer s3cret-literal"})
    found = problems(tmp_path, files)
    assert found and not any("s3cret" in line for line in found)


# ------------------------------------------------------------------------------ the environment


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {},
            "mcp/github.yaml: mcp-github: transport.environment.GITHUB_TOKEN: environment variable "
            "GITHUB_TOKEN is not set in the host process",
        ),
        ({"GITHUB_TOKEN": ""}, "environment variable GITHUB_TOKEN is empty in the host process"),
    ],
)
def test_validation_with_an_environment_needs_every_reference_set_and_non_empty(
    tmp_path: Path, environ: dict[str, str], expected: str
) -> None:
    found = problems(tmp_path, {"mcp/github.yaml": SEED_GITHUB_YAML}, environ)
    assert len(found) == 1 and expected in found[0], found


def test_missing_header_references_are_named_with_their_header(tmp_path: Path) -> None:
    found = problems(tmp_path, {"mcp/servers.json": SEED_SERVERS_JSON}, {})
    assert found == [
        "mcp/servers.json: mcp-docs: headers.X-Workspace: environment variable WORKSPACE_ID is not set"
        " in the host process (references need a non-empty value)"
    ]


def test_a_header_reference_whose_value_has_a_line_break_is_refused(tmp_path: Path) -> None:
    files = entry(url="https://h.example", headers={"X": "${V}"})
    found = problems(tmp_path, files, {"V": "a\r\nInjected: 1"})
    assert found == ["mcp/servers.json: mcp-svc: headers.X: " + _HEADER_FROM_ENV]
    server = one_server(files, tmp_path / "again")
    with pytest.raises(ConfigError, match="line break"):
        resolve_headers(server, {"V": "a\nb"})


_HEADER_FROM_ENV = "the value from the environment contains a line break or NUL, which a header cannot carry"


def test_resolving_names_every_unset_variable_of_a_value(tmp_path: Path) -> None:
    server = one_server(entry(command="x", env={"AB": "${A}:${B}"}), tmp_path)
    with pytest.raises(ConfigError) as caught:
        resolve_env(server, {"A": ""})
    assert caught.value.message.endswith(
        "mcp-svc: env.AB: environment variable A is empty; environment variable B is not set in the host"
        " process (references need a non-empty value)"
    )


def test_templates_parse_into_literal_and_reference_parts() -> None:
    spec = parse_template("Bearer ${TOKEN} (${TEAM})")
    assert spec.references == ("TOKEN", "TEAM")
    assert spec.masked() == "***${TOKEN}***${TEAM}***"
    assert spec.resolve({"TOKEN": "${TEAM}", "TEAM": "t"}) == "Bearer ${TEAM} (t)"
    assert parse_template("").parts == ()


# ------------------------------------------------------------------------------ root config and selection

SERVERS: Files = {
    "mcp/servers.json": {"mcpServers": {"docs": {"url": "https://h.example"}, "fs": {"command": "x"}}},
    "mcp/github.yaml": SEED_GITHUB_YAML,
}


def with_root(text: str) -> Files:
    return SERVERS | {"config.yaml": text}


def test_the_root_config_selects_defaults_host_owned_servers_and_protocols(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        with_root(
            """
            defaults:
              mcp_servers: [mcp-github, mcp-docs]
            mcp:
              host_owned_servers: [mcp-docs]
              protocol_overrides:
                mcp-docs: 2026-07-28
                mcp-github: legacy
                mcp-fs: auto
            """
        ),
    )
    assert config.default_servers == ["mcp-github", "mcp-docs"]
    assert config.host_owned == frozenset({"mcp-docs"})
    assert config.protocol_overrides == {"mcp-docs": "2026-07-28", "mcp-github": "legacy", "mcp-fs": "auto"}
    assert [config.protocol(s) for s in ("mcp-docs", "mcp-github", "mcp-fs")] == [
        "2026-07-28",
        "legacy",
        "legacy",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "legacy"),
        ("mcp: {protocol_overrides: {mcp-docs: auto}}\n", "legacy"),
        ("mcp: {protocol_overrides: {mcp-docs: legacy}}\n", "legacy"),
        ("mcp: {protocol_overrides: {mcp-docs: '2026-07-28'}}\n", "2026-07-28"),
        ("mcp: {protocol_overrides: {mcp-docs: 2026-07-28}}\n", "2026-07-28"),
    ],
)
def test_auto_means_the_handshake_era_and_only_an_explicit_pin_is_modern(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert load(tmp_path, with_root(text)).protocol("mcp-docs") == expected


@pytest.mark.parametrize(
    ("text", "defaults"),
    [
        ("", []),
        ("defaults:\n", []),
        ("defaults: {mcp_servers: null}\n", []),
        ("defaults: {mcp_servers: []}\n", []),
        ("defaults: {mcp_servers: [mcp-fs, mcp-docs]}\n", ["mcp-fs", "mcp-docs"]),
    ],
)
def test_root_defaults_may_be_absent_null_or_empty(tmp_path: Path, text: str, defaults: list[str]) -> None:
    assert load(tmp_path, with_root(text)).default_servers == defaults


def test_a_conversation_inherits_with_null_selects_none_with_empty_and_keeps_its_list(tmp_path: Path) -> None:
    config = load(tmp_path, with_root("defaults: {mcp_servers: [mcp-github]}\n"))
    assert config.select(None) == ["mcp-github"]
    assert config.select([]) == []
    assert config.select(["mcp-fs", "mcp-docs"]) == ["mcp-fs", "mcp-docs"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["mcp-nope"], "mcp_servers: no configured MCP server has id 'mcp-nope'"),
        (["docs"], "no configured MCP server has id 'docs' (did you mean mcp-docs?)"),
        (["mcp-fs", "mcp-fs"], "mcp_servers: 'mcp-fs' is listed twice"),
        ("mcp-fs", "must be a list of server ids, not a string"),
    ],
)
def test_a_conversation_selection_names_only_configured_servers(
    tmp_path: Path, value: Any, message: str
) -> None:
    config = load(tmp_path, SERVERS)
    with pytest.raises(ConfigError) as caught:
        config.select(value)
    assert message in caught.value.message


def test_the_protocol_of_an_unknown_server_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no configured MCP server has id 'mcp-x'"):
        load(tmp_path, SERVERS).protocol("mcp-x")


# fmt: off
BAD_ROOTS = [
    ("defaults-unknown-id", "defaults: {mcp_servers: [mcp-github, mcp-nope]}\n",
     "config.yaml: defaults.mcp_servers[1]: no configured MCP server has id 'mcp-nope'"),
    ("defaults-unnormalised-id", "defaults: {mcp_servers: [github]}\n",
     "config.yaml: defaults.mcp_servers[0]: no configured MCP server has id 'github'"
     " (did you mean mcp-github?)"),
    ("defaults-twice", "defaults: {mcp_servers: [mcp-fs, mcp-fs]}\n",
     "config.yaml: defaults.mcp_servers[1]: 'mcp-fs' is listed twice"),
    ("defaults-string", "defaults: {mcp_servers: mcp-fs}\n",
     "config.yaml: defaults.mcp_servers: must be a list of server ids, got a string"),
    ("defaults-number-item", "defaults: {mcp_servers: [1]}\n",
     "config.yaml: defaults.mcp_servers[0]: must be a server id string, got a number"),
    ("host-owned-unknown", "mcp: {host_owned_servers: [mcp-nope]}\n",
     "config.yaml: mcp.host_owned_servers[0]: no configured MCP server has id 'mcp-nope'"),
    ("override-unknown-id", "mcp: {protocol_overrides: {mcp-nope: auto}}\n",
     "config.yaml: mcp.protocol_overrides.mcp-nope: no configured MCP server has id 'mcp-nope'"),
    ("override-handshake-version", "mcp: {protocol_overrides: {mcp-docs: '2025-06-18'}}\n",
     "config.yaml: mcp.protocol_overrides.mcp-docs: must be auto, legacy or 2026-07-28, not '2025-06-18'"),
    ("override-other-date", "mcp: {protocol_overrides: {mcp-docs: 2025-06-18}}\n",
     "must be auto, legacy or 2026-07-28, not '2025-06-18'"),
    ("overrides-list", "mcp: {protocol_overrides: [mcp-docs]}\n",
     "config.yaml: mcp.protocol_overrides: must be a mapping of server id → mode"),
    ("unknown-top-level", "agents: {}\n", "config.yaml: agents: unknown field (allowed: defaults, mcp)"),
    ("unknown-mcp-key", "mcp: {lifecycle: keep}\n",
     "config.yaml: mcp.lifecycle: unknown field (allowed: host_owned_servers, protocol_overrides)"),
    ("unknown-defaults-key", "defaults: {model: x}\n",
     "config.yaml: defaults.model: unknown field (allowed: mcp_servers)"),
    ("mcp-not-mapping", "mcp: [a]\n", "config.yaml: mcp: must be a mapping, got a list"),
    ("root-not-mapping", "- a\n", "config.yaml: must be a mapping, got a list"),
    ("root-duplicate-key", "mcp: {}\nmcp: {}\n",
     "config.yaml: invalid YAML at line 2 column 1: duplicate key 'mcp'"),
]
# fmt: on


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in BAD_ROOTS])
def test_bad_root_configs_are_rejected_naming_the_field(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(tmp_path, with_root(text))
    assert any(expected in line for line in found), found


def test_a_reference_to_an_invalid_server_reports_only_the_server(tmp_path: Path) -> None:
    files = with_root("defaults: {mcp_servers: [mcp-bad]}\n") | {
        "mcp/bad.json": {"mcpServers": {"bad": {"command": "x", "cwd": "/"}}}
    }
    assert problems(tmp_path, files) == [
        "mcp/bad.json: mcp-bad: cwd: unknown field (client-specific fields"
        " are not supported; allowed: type, command, args, env, url, headers)"
    ]


def test_a_missing_root_folder_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(HostConfigError) as caught:
        load_host_config(tmp_path / "nope")
    assert caught.value.problems == [
        f"{tmp_path / 'nope'}: the root config folder does not exist or is not a directory"
    ]


def test_the_error_message_is_one_line_that_counts_the_rest(tmp_path: Path) -> None:
    with pytest.raises(HostConfigError) as caught:
        load(tmp_path, entry(command="", cwd="/", timeout=1))
    assert len(caught.value.problems) == 3
    assert caught.value.message.endswith("(and 2 more; run `steamharness host validate`)")
    assert "\n" not in caught.value.message and caught.value.code == "invalid_config"


# ------------------------------------------------------------------------------ captures and display


def test_a_capture_keeps_location_and_digest_and_no_values(tmp_path: Path) -> None:
    config = load(tmp_path, {"mcp/servers.json": SEED_SERVERS_JSON})
    captured = capture(config.servers["mcp-docs"])
    assert captured == Capture(
        "mcp-docs", tmp_path / "root/mcp/servers.json", config.servers["mcp-docs"].digest
    )
    assert captured.digest.startswith("sha256:") and len(captured.digest) == 71
    assert Capture.from_json(json.loads(json.dumps(captured.to_json()))) == captured
    assert "example-token" not in json.dumps(captured.to_json())
    assert "example-token" not in repr(config)
    check_capture(captured)


def test_editing_or_removing_a_captured_source_raises_mcp_source_changed(tmp_path: Path) -> None:
    config = load(tmp_path, {"mcp/servers.json": SEED_SERVERS_JSON, "mcp/github.yaml": SEED_GITHUB_YAML})
    docs, github = capture(config.servers["mcp-docs"]), capture(config.servers["mcp-github"])
    edited = json.loads(json.dumps(SEED_SERVERS_JSON))
    edited["mcpServers"]["filesystem"]["args"].append("/other")  # another server in the same file
    write(tmp_path / "root", {"mcp/servers.json": edited})
    with pytest.raises(McpSourceChanged) as changed:
        check_capture(docs)
    assert changed.value.code == "mcp_source_changed" and changed.value.status == 409
    assert (
        "mcp-docs: its source" in changed.value.message
        and "changed since it was captured" in changed.value.message
    )
    check_capture(github)
    (tmp_path / "root/mcp/github.yaml").unlink()
    with pytest.raises(McpSourceChanged, match="is gone since it was captured"):
        check_capture(github)


def test_reloading_after_an_edit_gives_a_new_digest(tmp_path: Path) -> None:
    before = one_server(entry(command="x"), tmp_path).digest
    after = one_server(entry(command="y"), tmp_path).digest
    assert before != after


def test_describe_command_shell_quotes_and_shows_env_names_never_values(tmp_path: Path) -> None:
    files = entry(
        command="/opt/my tools/run", args=["--dir", "a b", "it's"], env={"TOKEN": "lit-s3cret", "E": ""}
    )
    server = one_server(files, tmp_path)
    assert describe_command(server) == "'/opt/my tools/run' --dir 'a b' 'it'\"'\"'s' (env: TOKEN, E)"
    assert "s3cret" not in repr(server)


def test_describe_command_for_a_remote_server_shows_the_url_and_header_names(tmp_path: Path) -> None:
    config = load(tmp_path, {"mcp/servers.json": SEED_SERVERS_JSON})
    assert describe_command(config.servers["mcp-docs"]) == (
        "https://mcp.example.com/mcp (headers: Authorization, X-Workspace)"
    )
    assert describe_command(config.servers["mcp-filesystem"]) == (
        "npx -y @modelcontextprotocol/server-filesystem /path/to/workspace"
    )
