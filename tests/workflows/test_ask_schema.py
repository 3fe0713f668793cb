"""`ctx.ask(title, schema)`: a question asked with a JSON Schema, the MCP elicitation subset
(flat string / number / integer / boolean / multi-select properties). Checked, then stored
and elicited exactly as written; answers validated against it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from webui.errors import ProjectError
from webui.runs.questions import _question  # pyright: ignore[reportPrivateUsage]
from webui.validation import field_errors
from webui.workflows.json_schema import check_ask_schema

DEFAULTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30, "minimum": 0, "maximum": 150},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}
ENUMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [{"const": "v1", "title": "One"}, {"const": "v2", "title": "Two"}],
        },
        "legacyEnum": {"type": "string", "enum": ["o1", "o2"], "enumNames": ["Option 1", "Option 2"]},
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "titledMulti": {
            "type": "array",
            "items": {"anyOf": [{"const": "x", "title": "X"}, {"const": "y", "title": "Y"}]},
        },
    },
    "required": ["untitledSingle"],
}


@pytest.mark.parametrize("schema", [DEFAULTS, ENUMS])
def test_a_schema_question_is_stored_and_elicited_exactly_as_written(schema: dict[str, Any]) -> None:
    question = _question("ask", {"title": "T", "fields": copy.deepcopy(schema), "message": "Hi"})
    assert json.dumps(question["requested_schema"]) == json.dumps(schema)
    assert question["message"] == "Hi" and question["blockers"] == []
    names = [f["name"] for f in question["fields"]]
    assert names == list(schema["properties"])


def test_the_field_summary_names_types_and_required() -> None:
    fields = _question("ask", {"title": "T", "fields": ENUMS})["fields"]
    assert fields[0] == {
        "name": "untitledSingle",
        "type": "string",
        "required": True,
        "title": "untitledSingle",
    }
    assert fields[3]["type"] == "array" and not fields[3]["required"]


def test_a_list_of_fields_still_works() -> None:
    question = _question(
        "ask", {"title": "T", "fields": [{"name": "n", "type": "integer", "required": True}]}
    )
    assert question["requested_schema"] == {
        "type": "object",
        "properties": {"n": {"type": "integer", "title": "n"}},
        "required": ["n"],
    }


def test_answers_are_validated_against_the_schema() -> None:
    assert (
        field_errors(ENUMS, {"untitledSingle": "option1", "titledSingle": "v2", "titledMulti": ["x"]}) == {}
    )
    errors = field_errors(
        ENUMS,
        {"untitledSingle": "nope", "titledSingle": "v9", "untitledMulti": ["c"], "legacyEnum": "Option 1"},
    )
    assert set(errors) == {"untitledSingle", "titledSingle", "untitledMulti", "legacyEnum"}
    assert field_errors(DEFAULTS, {"age": 1.5})["age"] == "1.5 is not of type 'integer'"
    assert field_errors(DEFAULTS, {"age": True})["age"] == "True is not of type 'integer'"
    assert field_errors(DEFAULTS, {"age": 200})["age"] == "200 is greater than the maximum of 150"


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ([], "q: expected a JSON Schema object, got array"),
        ({"type": "array"}, 'q/type: a question\'s schema must be "type": "object"'),
        ({"type": "object", "$defs": {}}, "q: '$defs' is not part of an elicitation form field"),
        ({"type": "object", "properties": []}, "q/properties: expected an object"),
        (
            {"type": "object", "properties": {"a b": {"type": "string"}}},
            "q/properties: invalid field name 'a b' (letters, digits and '_', not starting with a digit)",
        ),
        (
            {"type": "object", "properties": {"o": {"type": "object"}}},
            'q/properties/o/type: expected "string", "number", "integer", "boolean" or "array",'
            " got 'object'",
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
            "q/properties/s: 'pattern' is not part of an elicitation form field",
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string", "enum": ["a"], "default": "b"}}},
            "q/properties/s/default: expected one of the field's string values",
        ),
        (
            {
                "type": "object",
                "properties": {"s": {"type": "string", "enum": ["a", "b"], "enumNames": ["A"]}},
            },
            "q/properties/s/enumNames: one name per enum value",
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string", "oneOf": [{"const": "a"}]}}},
            'q/properties/s/oneOf/0: expected {"const": string, "title": string}',
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "default": True}}},
            "q/properties/n/default: expected an integer",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "default": 2.5}}},
            "q/properties/n/default: expected an integer",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "number", "default": 5, "maximum": 4}}},
            "q/properties/n/default: outside minimum/maximum",
        ),
        (
            {"type": "object", "properties": {"b": {"type": "boolean", "default": 1}}},
            "q/properties/b/default: expected true or false",
        ),
        (
            {"type": "object", "properties": {"m": {"type": "array", "items": {"type": "string"}}}},
            'q/properties/m/items: a multi-select needs "type": "string" and an enum',
        ),
        (
            {
                "type": "object",
                "properties": {"m": {"type": "array", "items": {"type": "integer", "enum": [1]}}},
            },
            'q/properties/m/items: a multi-select needs "type": "string" and an enum',
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["t"]},
            "q/required: expected a list of the schema's property names",
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string", "format": "regex"}}},
            "q/properties/s/format: expected one of email, uri, date, date-time",
        ),
    ],
)
def test_schemas_outside_the_elicitation_subset_are_refused(schema: Any, problem: str) -> None:
    with pytest.raises(ProjectError) as info:
        check_ask_schema(schema, "q")
    assert info.value.message == problem


def test_a_refused_schema_fails_the_ask_rpc_with_a_project_error() -> None:
    with pytest.raises(ProjectError, match=r"ctx.ask\(\) fields/properties/x/type"):
        _question("ask", {"title": "T", "fields": {"type": "object", "properties": {"x": {"type": "null"}}}})
