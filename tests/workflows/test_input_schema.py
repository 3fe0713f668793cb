"""An entrypoint's own `inputSchema` (JSON Schema 2020-12): checked at load with a path in
every message, served verbatim, arguments validated against it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.workflows.test_project import load_error, minimal_package, package_path, write_project
from webui.errors import InvalidArguments
from webui.workflows.project import load_project, structure_report
from webui.workflows.schema import tool_input_schema, validate_arguments

SUITE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def with_schema(tmp_path: Path, schema: Any, **extra: Any) -> Path:
    package = minimal_package()
    package["entrypoints"][0]["inputSchema"] = schema
    package["entrypoints"][0].update(extra)
    return write_project(tmp_path / "p", package)


def where(root: Path) -> str:
    return f"{package_path(root)}: entrypoints[0].inputSchema"


def test_the_schema_is_served_exactly_as_written(tmp_path: Path) -> None:
    ep = load_project(with_schema(tmp_path, SUITE_SCHEMA)).entrypoints[0]
    served = tool_input_schema(ep.params, ep.input_schema, file_mode="server")
    assert served == SUITE_SCHEMA
    assert json.dumps(served) == json.dumps(SUITE_SCHEMA)  # key order kept too
    assert ep.params == ()
    served["properties"].clear()  # each caller gets its own copy
    assert tool_input_schema(ep.params, ep.input_schema, file_mode="server") == SUITE_SCHEMA
    assert (
        structure_report(load_project(with_schema(tmp_path, SUITE_SCHEMA)))["entrypoints"][0]["inputSchema"]
        == SUITE_SCHEMA
    )


def test_arguments_are_validated_with_2020_12_and_per_field_messages(tmp_path: Path) -> None:
    ep = load_project(with_schema(tmp_path, SUITE_SCHEMA)).entrypoints[0]
    schema = tool_input_schema(ep.params, ep.input_schema, file_mode="server")
    ok = {"name": "A", "contactMethod": "phone", "phone": "1", "address": {"city": "X"}}
    assert validate_arguments(schema, ok, tool="t") == ok
    with pytest.raises(InvalidArguments) as info:
        validate_arguments(schema, {"contactMethod": "phone", "email": "e", "address": {"city": 3}}, tool="t")
    assert "address.city: 3 is not of type 'string'" in info.value.message
    assert "'phone' is a required property" in info.value.message
    with pytest.raises(InvalidArguments, match="Additional properties are not allowed"):
        validate_arguments(schema, {"email": "e", "extra": 1}, tool="t")


def test_params_and_input_schema_are_exclusive(tmp_path: Path) -> None:
    root = with_schema(tmp_path, SUITE_SCHEMA, params=[{"name": "a", "type": "string"}])
    assert load_error(root) == f"{package_path(root)}: entrypoints[0]: give params or inputSchema, not both"


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ([], ": expected a JSON Schema object, got "),
        ({"type": "string"}, '/type: a tool\'s input schema must be "type": "object"'),
        (
            {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"},
            "/$schema: only https://json-schema.org/draft/2020-12/schema is supported, not"
            " 'http://json-schema.org/draft-07/schema#'",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "strin"}}},
            "/properties/a/type: not valid JSON Schema 2020-12:",
        ),
        ({"type": "object", "required": "a"}, "/required: not valid JSON Schema 2020-12:"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
            "/properties/a/$ref: 'https://example.com/a.json' is not local",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}},
            "/properties/a/$ref: 'other.json#/x' is not local",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            "/properties/a/$ref: '#/$defs/missing' points to nothing in the schema",
        ),
        (
            {"type": "object", "properties": {"a": {"$id": "https://example.com/x", "type": "string"}}},
            "/properties/a/$id: not supported",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?!a)"}}},
            "/properties/a/pattern: refused: a lookaround",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}},
            "/properties/a/pattern: refused: not a regular expression the linear-time engine (RE2) runs:",
        ),
    ],
)
def test_a_bad_schema_is_refused_at_load_with_its_path(tmp_path: Path, schema: Any, problem: str) -> None:
    root = with_schema(tmp_path, schema)
    assert load_error(root).startswith(where(root) + problem)


def test_huge_and_deep_schemas_are_refused(tmp_path: Path) -> None:
    big = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(800)},
    }
    root = with_schema(tmp_path, big)
    assert "bytes of JSON, more than 65536" in load_error(root)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(20):
        deep = {"type": "object", "properties": {"a": deep}}
    root = with_schema(tmp_path, deep)
    assert "nested more than 32 levels" in load_error(root)


def test_local_anchors_and_refs_resolve(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "$defs": {"n": {"$anchor": "num", "type": "integer"}},
        "properties": {"a": {"$ref": "#num"}, "b": {"$ref": "#/$defs/n"}},
    }
    ep = load_project(with_schema(tmp_path, schema)).entrypoints[0]
    served = tool_input_schema(ep.params, ep.input_schema, file_mode="server")
    with pytest.raises(InvalidArguments, match=r"a: 'x' is not of type 'integer'"):
        validate_arguments(served, {"a": "x", "b": 1}, tool="t")
