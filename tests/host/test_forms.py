"""Which JSON Schemas the host shows as forms (webui.host.forms): one check, two policies."""

from __future__ import annotations

from typing import Any

import pytest

from webui.host.forms import ELICITATION, TOOL_INPUT, form_problems, tool_form_problem, unsupported_reasons

FLAT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "format": "email"},
        "count": {"type": "integer", "minimum": 1},
        "ok": {"type": "boolean"},
        "color": {
            "type": "string",
            "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["name"],
}


def test_a_flat_form_fits_both_policies() -> None:
    assert unsupported_reasons(FLAT) == [] and tool_form_problem(FLAT) is None


@pytest.mark.parametrize(
    ("schema", "elicitation", "tool"),
    [
        ("nope", "the requested schema is not an object", "the tool has no input schema object"),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/x"}}},
            "the form uses references ($ref), which are not supported",
            "the input schema uses references ($ref)",
        ),
        (
            {"type": "array"},
            "the requested schema must be an object of fields",
            "the input schema is not an object of fields",
        ),
        (
            {"type": "object", "properties": ["a"]},
            "the requested schema has no fields",
            "the input schema's properties are not an object",
        ),
        ({"type": "object", "properties": {"a": 1}}, "field 'a' has no schema", "field 'a' has no schema"),
    ],
)
def test_schema_wide_problems_read_in_each_policys_words(schema: Any, elicitation: str, tool: str) -> None:
    assert unsupported_reasons(schema) == [elicitation]
    assert tool_form_problem(schema) == tool


def test_the_policies_differ_where_the_forms_do() -> None:
    lenient = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "uuid"},
            "numbers": {"type": "array", "items": {"type": "number"}},
            "secret": {"type": "string", "format": "password"},
        },
        "required": ["missing"],
    }
    assert tool_form_problem(lenient) is None
    assert unsupported_reasons(lenient) == [
        "field 'when' has unsupported format 'uuid'",
        "field 'numbers': only string multi-select enums are supported",
        "field 'secret' is declared sensitive; secrets are never entered through MCP forms",
        "required names a field that does not exist",
    ]
    nested = {"type": "object", "properties": {"a": {"type": "object"}, "b": {"type": "array", "items": {}}}}
    assert form_problems(nested, TOOL_INPUT) == [
        "field 'a' has type 'object'",
        "field 'b' is a list of values without a single type",
    ]
    assert tool_form_problem(nested) == "field 'a' has type 'object'"  # the first one
    assert form_problems(nested, ELICITATION) == [
        "field 'a' has unsupported type 'object'",
        "field 'b': only string multi-select enums are supported",
    ]
