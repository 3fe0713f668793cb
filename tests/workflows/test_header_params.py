"""Params mirrored as custom headers (`"header"` → `x-mcp-header`, SEP-2243): names checked
at load (HTTP token characters, unique without case), only on single string/integer/boolean
params; the same rules for an `inputSchema`'s own `x-mcp-header` properties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workflows.test_project import load_error, minimal_package, package_path, write_project
from webui.errors import ProjectError
from webui.workflows.params import parse_params
from webui.workflows.project import load_project
from webui.workflows.schema import input_schema, tool_input_schema


def test_a_header_param_gets_x_mcp_header_in_its_schema(tmp_path: Path) -> None:
    root = write_project(
        tmp_path / "p",
        minimal_package(
            [
                {"name": "region", "type": "string", "required": True, "header": "Region"},
                {"name": "n", "type": "integer", "header": "Count_1"},
                {"name": "loud", "type": "boolean", "header": "X.Loud~"},
            ]
        ),
    )
    params = load_project(root).entrypoints[0].params
    props = input_schema(params, file_mode="server")["properties"]
    assert props["region"] == {"type": "string", "x-mcp-header": "Region"}
    assert props["n"]["x-mcp-header"] == "Count_1"
    assert props["loud"]["x-mcp-header"] == "X.Loud~"


@pytest.mark.parametrize("name", ["", "Re gion", "Région", "a:b", "a/b", 'a"b', "x" * 65, 7, True])
def test_a_header_name_must_be_http_token_characters(tmp_path: Path, name: Any) -> None:
    root = write_project(tmp_path / "p", minimal_package([{"name": "r", "type": "string", "header": name}]))
    assert load_error(root).startswith(
        f"{package_path(root)}: entrypoints[0].params[0].header: invalid header name"
    )


def test_header_names_are_unique_without_case(tmp_path: Path) -> None:
    params = [
        {"name": "a", "type": "string", "header": "Region"},
        {"name": "b", "type": "string", "header": "REGION"},
    ]
    root = write_project(tmp_path / "p", minimal_package(params))
    assert load_error(root) == (
        f"{package_path(root)}: entrypoints[0].params[1].header: header 'REGION' is already the header"
        " of param 'a' (header names are compared without case)"
    )


@pytest.mark.parametrize(
    ("param", "shown"),
    [
        ({"type": "number"}, "number"),
        ({"type": "file"}, "file"),
        ({"type": "checkboxes", "options": ["a"]}, "checkboxes"),
        ({"type": "string", "multiple": True}, "string (multiple)"),
    ],
)
def test_only_single_string_integer_boolean_params_can_be_headers(
    tmp_path: Path, param: dict[str, Any], shown: str
) -> None:
    root = write_project(tmp_path / "p", minimal_package([{"name": "a", "header": "A", **param}]))
    assert load_error(root) == (
        f"{package_path(root)}: entrypoints[0].params[0].header: only single string, positional,"
        f" integer and boolean params can be headers, not {shown}"
    )


def test_question_fields_cannot_be_headers() -> None:
    with pytest.raises(ProjectError, match=r"ask\[0\]\.header: only entrypoint params"):
        parse_params([{"name": "a", "type": "string", "header": "A"}], where="ask")


def with_schema(tmp_path: Path, schema: dict[str, Any]) -> Path:
    package = minimal_package()
    package["entrypoints"][0]["inputSchema"] = schema
    return write_project(tmp_path / "p", package)


def test_an_input_schema_may_mark_top_level_properties_as_headers(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "Region"}}}
    ep = load_project(with_schema(tmp_path, schema)).entrypoints[0]
    assert tool_input_schema(ep.params, ep.input_schema, file_mode="server") == schema


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            {"type": "object", "properties": {"r": {"type": "number", "x-mcp-header": "R"}}},
            "/properties/r/x-mcp-header: only string, integer and boolean properties can be headers",
        ),
        (
            {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "R r"}}},
            "/properties/r/x-mcp-header: invalid header name 'R r'",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {"type": "string", "x-mcp-header": "Dup"},
                    "b": {"type": "string", "x-mcp-header": "dup"},
                },
            },
            "/properties/b/x-mcp-header: header 'dup' is already the header of 'a'",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "o": {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "R"}}}
                },
            },
            "/properties/o/properties/r/x-mcp-header: only a top-level property can be a header",
        ),
        (
            {"type": "object", "$defs": {"r": {"type": "string", "x-mcp-header": "R"}}},
            "/$defs/r/x-mcp-header: only a top-level property can be a header",
        ),
    ],
)
def test_bad_x_mcp_header_in_an_input_schema_is_refused(
    tmp_path: Path, schema: dict[str, Any], problem: str
) -> None:
    root = with_schema(tmp_path, schema)
    assert load_error(root).startswith(f"{package_path(root)}: entrypoints[0].inputSchema{problem}")


def test_the_sdk_accepts_every_header_schema_we_make() -> None:
    from mcp.shared.inbound import find_invalid_x_mcp_header

    params = parse_params(
        [
            {"name": "a", "type": "string", "header": "A"},
            {"name": "b", "type": "positional", "header": "B"},
            {"name": "c", "type": "integer", "header": "C"},
            {"name": "d", "type": "boolean", "header": "D"},
        ],
        where="p",
        headers=True,
    )
    assert find_invalid_x_mcp_header(input_schema(params, file_mode="server")) is None
