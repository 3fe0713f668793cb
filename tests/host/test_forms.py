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


@pytest.mark.parametrize(
    "name",
    ['a" hx-post="/admin/users', "with space", "1st", "", "é", "a" * 65, "<b>", "x'y"],
)
def test_a_field_whose_name_is_not_a_safe_identifier_is_refused_by_both_policies_naming_it(name: str) -> None:
    schema = {"type": "object", "properties": {name: {"type": "string"}, "fine": {"type": "string"}}}
    why = f"field {name!r} was refused: its name is not a safe identifier"
    assert [r for r in unsupported_reasons(schema) if r.startswith(why)] == unsupported_reasons(schema)
    assert len(unsupported_reasons(schema)) == 1
    assert str(tool_form_problem(schema)).startswith(why)


def test_plain_names_with_dots_and_dashes_are_fields() -> None:
    schema = {
        "type": "object",
        "properties": {n: {"type": "string"} for n in ("a.b", "start-date", "_x", "A9")},
    }
    assert unsupported_reasons(schema) == [] and tool_form_problem(schema) is None


def test_a_very_long_refused_name_is_quoted_clipped() -> None:
    name = "x y" * 500
    (why,) = unsupported_reasons({"type": "object", "properties": {name: {"type": "string"}}})
    assert len(why) < 400 and why.startswith("field 'x yx y")
