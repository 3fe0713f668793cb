"""Schemas derived from params: MCP input schemas, validation, elicitation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp_types._v2025_11_25 import PrimitiveSchemaDefinition
from pydantic import TypeAdapter

from tests.workflows.test_project import DOCUMENTED_EXAMPLE
from webui.errors import InvalidArguments
from webui.workflows.params import Param, parse_params
from webui.workflows.schema import (
    FileMode,
    elicitation_schema,
    field_summary,
    form_blockers,
    input_schema,
    validate_arguments,
)

FILE_MODES: tuple[FileMode, ...] = ("local", "server")
SERVER_FILE = {
    "type": "object",
    "properties": {"id": {"type": "string"}},
    "required": ["id"],
    "additionalProperties": False,
}
PRIMITIVE = TypeAdapter[Any](PrimitiveSchemaDefinition)


def params_of(*raw: dict[str, Any]) -> tuple[Param, ...]:
    return parse_params(list(raw), where="test")


def one(**raw: Any) -> tuple[Param, ...]:
    """A single param named `p` (unless named otherwise)."""
    return params_of({"name": "p", **raw})


def spec_params() -> tuple[Param, ...]:
    return parse_params(copy.deepcopy(DOCUMENTED_EXAMPLE["entrypoints"][0]["params"]), where="spec")


def prop(params: tuple[Param, ...], file_mode: FileMode = "local", name: str = "p") -> dict[str, Any]:
    return input_schema(params, file_mode=file_mode)["properties"][name]


def invalid(schema: dict[str, Any], arguments: Any, tool: str = "validate") -> str:
    with pytest.raises(InvalidArguments) as info:
        validate_arguments(schema, arguments, tool=tool)
    return info.value.message


# --------------------------------------------------------------------------- input schema


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "string"}, {"type": "string"}),
        ({"type": "positional"}, {"type": "string"}),
        ({"type": "number"}, {"type": "number"}),
        ({"type": "boolean"}, {"type": "boolean"}),
        ({"type": "string", "multiple": True}, {"type": "array", "items": {"type": "string"}}),
        ({"type": "positional", "multiple": True}, {"type": "array", "items": {"type": "string"}}),
        ({"type": "number", "multiple": True}, {"type": "array", "items": {"type": "number"}}),
        ({"type": "boolean", "multiple": True}, {"type": "array", "items": {"type": "boolean"}}),
        ({"type": "checkboxes"}, {"type": "array", "items": {"type": "string"}}),
    ],
)
@pytest.mark.parametrize("file_mode", FILE_MODES)
def test_each_value_param_type_maps_to_its_mcp_input_type(
    raw: dict[str, Any], expected: dict[str, Any], file_mode: FileMode
) -> None:
    assert prop(one(**raw), file_mode) == expected


def test_a_local_file_is_an_absolute_path_string() -> None:
    schema = prop(one(type="file"), "local")
    assert schema["type"] == "string"
    assert "Absolute path" in schema["description"]


def test_multiple_local_files_are_an_array_of_path_strings() -> None:
    schema = prop(one(type="file", multiple=True), "local")
    assert schema["type"] == "array"
    assert schema["items"] == {"type": "string"}
    assert "Absolute paths" in schema["description"]


def test_a_server_file_is_an_object_with_only_an_id() -> None:
    schema = prop(one(type="file"), "server")
    description = schema.pop("description")
    assert schema == SERVER_FILE
    assert '{"id"' in description


def test_multiple_server_files_are_an_array_of_id_objects() -> None:
    schema = prop(one(type="file", multiple=True), "server")
    assert schema["type"] == "array"
    assert schema["items"] == SERVER_FILE


@pytest.mark.parametrize("file_mode", FILE_MODES)
def test_a_file_description_keeps_the_authors_text_and_adds_the_hint(file_mode: FileMode) -> None:
    description = prop(one(type="file", description="The invoice PDF"), file_mode)["description"]
    assert description.startswith("The invoice PDF (")


@pytest.mark.parametrize("file_mode", FILE_MODES)
def test_the_input_schema_is_a_closed_object_with_required_params_in_order(file_mode: FileMode) -> None:
    schema = input_schema(spec_params(), file_mode=file_mode)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["prompt", "document"]
    assert list(schema["properties"]) == [p["name"] for p in DOCUMENTED_EXAMPLE["entrypoints"][0]["params"]]


def test_required_is_omitted_when_nothing_is_required() -> None:
    schema = input_schema(one(type="string"), file_mode="local")
    assert "required" not in schema
    assert input_schema((), file_mode="server") == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


def test_title_description_and_default_go_into_the_schema() -> None:
    params = one(type="number", title="Limit", description="How many", default=3)
    assert prop(params) == {"type": "number", "title": "Limit", "description": "How many", "default": 3}


def test_a_label_key_becomes_the_schema_title() -> None:
    assert prop(one(type="string", label="Prompt"))["title"] == "Prompt"


def test_unlabeled_options_become_an_enum() -> None:
    assert prop(one(type="string", options=["a", "b"])) == {"type": "string", "enum": ["a", "b"]}
    assert prop(one(type="number", options=[1, 2.5])) == {"type": "number", "enum": [1, 2.5]}


def test_labeled_options_become_one_of_const_with_titles() -> None:
    params = one(type="string", options=[{"value": "fast", "label": "Fast"}, "thorough"], default="fast")
    assert prop(params) == {
        "type": "string",
        "oneOf": [{"const": "fast", "title": "Fast"}, {"const": "thorough", "title": "thorough"}],
        "default": "fast",
    }


def test_array_options_go_on_items_as_enum() -> None:
    assert prop(one(type="checkboxes", options=["a", "b"], default=["a"])) == {
        "type": "array",
        "items": {"type": "string", "enum": ["a", "b"]},
        "default": ["a"],
    }


def test_labeled_array_options_go_on_items_as_any_of_const_with_titles() -> None:
    params = one(type="string", multiple=True, options=[{"value": "x", "label": "Ex"}, "y"])
    assert prop(params) == {
        "type": "array",
        "items": {"type": "string", "anyOf": [{"const": "x", "title": "Ex"}, {"const": "y", "title": "y"}]},
    }


@pytest.mark.parametrize("fmt", ["date", "date-time"])
def test_date_formats_go_into_the_schema(fmt: str) -> None:
    assert prop(one(type="string", format=fmt)) == {"type": "string", "format": fmt}
    assert prop(one(type="positional", multiple=True, format=fmt)) == {
        "type": "array",
        "items": {"type": "string", "format": fmt},
    }


def test_the_documented_example_server_schema_in_full() -> None:
    schema = input_schema(spec_params(), file_mode="server")
    for name in ("document", "attachments"):
        del schema["properties"][name]["description"]
    assert schema == {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "What to check"},
            "limit": {"type": "number", "default": 3},
            "strict": {"type": "boolean"},
            "mode": {
                "type": "string",
                "oneOf": [{"const": "fast", "title": "Fast"}, {"const": "thorough", "title": "thorough"}],
            },
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
            "names": {"type": "array", "items": {"type": "string"}},
            "due": {"type": "string", "format": "date"},
            "target": {"type": "string"},
            "document": SERVER_FILE,
            "attachments": {"type": "array", "items": SERVER_FILE},
        },
        "required": ["prompt", "document"],
        "additionalProperties": False,
    }


ALL_SHAPES: list[dict[str, Any]] = [
    *copy.deepcopy(DOCUMENTED_EXAMPLE["entrypoints"][0]["params"]),
    {"name": "n_opts", "type": "number", "options": [{"value": 1, "label": "One"}, 2], "multiple": True},
    {"name": "b_opts", "type": "boolean", "options": [True, False], "default": True},
    {"name": "when", "type": "string", "format": "date-time", "multiple": True, "default": []},
    {"name": "c_lab", "type": "checkboxes", "options": [{"value": "x", "label": "X"}], "title": "C"},
]


@pytest.mark.parametrize("file_mode", FILE_MODES)
def test_every_input_schema_is_valid_json_schema_2020_12(file_mode: FileMode) -> None:
    Draft202012Validator.check_schema(input_schema(params_of(*ALL_SHAPES), file_mode=file_mode))


def test_input_schema_is_deterministic_and_not_shared_between_calls() -> None:
    params = spec_params()
    first = input_schema(params, file_mode="server")
    second = input_schema(params, file_mode="server")
    assert first == second
    first["properties"]["document"]["properties"]["id"]["type"] = "number"
    assert second["properties"]["document"]["properties"]["id"]["type"] == "string"


# --------------------------------------------------------------------------- validate_arguments


@pytest.fixture
def server_schema() -> dict[str, Any]:
    return input_schema(spec_params(), file_mode="server")


@pytest.fixture
def local_schema() -> dict[str, Any]:
    return input_schema(spec_params(), file_mode="local")


GOOD_SERVER_ARGS: dict[str, Any] = {
    "prompt": "check totals",
    "limit": 2.5,
    "strict": False,
    "mode": "thorough",
    "tags": ["a", "c"],
    "names": [],
    "due": "2024-02-29",
    "target": "inbox",
    "document": {"id": "wf_0123456789abcdef"},
    "attachments": [{"id": "wf_1"}, {"id": "wf_2"}],
}


def test_valid_arguments_are_returned_without_injected_defaults(server_schema: dict[str, Any]) -> None:
    arguments = {"prompt": "x", "document": {"id": "wf_1"}}
    result = validate_arguments(server_schema, arguments, tool="validate")
    assert result == arguments
    assert "limit" not in result


def test_every_param_filled_in_validates(server_schema: dict[str, Any]) -> None:
    assert (
        validate_arguments(server_schema, copy.deepcopy(GOOD_SERVER_ARGS), tool="validate")
        == GOOD_SERVER_ARGS
    )


def test_local_file_params_take_path_strings(local_schema: dict[str, Any]) -> None:
    arguments = {"prompt": "x", "document": "/data/in.pdf", "attachments": ["/a", "/b"]}
    assert validate_arguments(local_schema, arguments, tool="validate") == arguments
    assert "document: {'id': 'wf_1'} is not of type 'string'" in invalid(
        local_schema, {"prompt": "x", "document": {"id": "wf_1"}}
    )


def test_none_arguments_count_as_an_empty_object() -> None:
    schema = input_schema(one(type="string"), file_mode="local")
    assert validate_arguments(schema, None, tool="t") == {}


def test_none_arguments_still_miss_required_params_listed_in_param_order(
    server_schema: dict[str, Any],
) -> None:
    assert invalid(server_schema, None) == (
        "Invalid arguments for tool 'validate': "
        "'prompt' is a required property (type: string); 'document' is a required property (type: object)"
    )


def test_a_missing_required_param_is_named(server_schema: dict[str, Any]) -> None:
    assert invalid(server_schema, {"document": {"id": "wf_1"}}) == (
        "Invalid arguments for tool 'validate': 'prompt' is a required property (type: string)"
    )


def test_every_problem_is_listed_in_one_line(server_schema: dict[str, Any]) -> None:
    assert invalid(server_schema, {"document": {"id": "wf_1"}, "limit": "x"}) == (
        "Invalid arguments for tool 'validate': "
        "'prompt' is a required property (type: string); limit: 'x' is not of type 'number'"
    )


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"limit": "3"}, "limit: '3' is not of type 'number'"),
        ({"limit": True}, "limit: True is not of type 'number'"),
        ({"strict": "yes"}, "strict: 'yes' is not of type 'boolean'"),
        ({"prompt": 5}, "prompt: 5 is not of type 'string'"),
        ({"names": "a"}, "names: 'a' is not of type 'array'"),
        ({"names": ["a", 1]}, "names[1]: 1 is not of type 'string'"),
        ({"tags": ["a", "z"]}, "tags[1]: 'z' is not one of ['a', 'b', 'c']"),
        ({"mode": "slow"}, "mode: 'slow' is not one of ['fast', 'thorough']"),
        ({"due": "2024-13-01"}, "due: '2024-13-01' is not a 'date'"),
        ({"due": "2023-02-29"}, "due: '2023-02-29' is not a 'date'"),
        ({"due": "20240101"}, "due: '20240101' is not a 'date'"),
        ({"extra": 1}, "Additional properties are not allowed ('extra' was unexpected)"),
        (
            {"document": {"id": "wf_1", "name": "a.pdf"}},
            "document: Additional properties are not allowed ('name' was unexpected)",
        ),
        (
            {"document": {"id": "wf_1", "path": "/etc/passwd"}},
            "document: Additional properties are not allowed",
        ),
        ({"document": {}}, "document: 'id' is a required property"),
        ({"document": {"id": 7}}, "document.id: 7 is not of type 'string'"),
        ({"document": "wf_1"}, "document: 'wf_1' is not of type 'object'"),
        ({"attachments": [{"id": "a"}, {"url": "http://x"}]}, "attachments[1]: 'id' is a required property"),
    ],
)
def test_bad_arguments_name_the_param_and_the_problem(
    server_schema: dict[str, Any], patch: dict[str, Any], expected: str
) -> None:
    message = invalid(server_schema, {**GOOD_SERVER_ARGS, **patch})
    assert message.startswith("Invalid arguments for tool 'validate': ")
    assert expected in message


@pytest.mark.parametrize(
    "value", ["2024-02-29T10:00:00Z", "2024-02-29T10:00:00.5+02:00", "2024-02-29t10:00:00z"]
)
def test_rfc3339_date_times_are_accepted(value: str) -> None:
    schema = input_schema(one(type="string", format="date-time"), file_mode="local")
    assert validate_arguments(schema, {"p": value}, tool="t") == {"p": value}


@pytest.mark.parametrize("value", ["2024-02-29T10:00:00", "2024-02-29", "yesterday", "2024-02-29 25:00:00Z"])
def test_bad_date_times_are_rejected(value: str) -> None:
    schema = input_schema(one(type="string", format="date-time"), file_mode="local")
    assert f"p: {value!r} is not a 'date-time'" in invalid(schema, {"p": value}, tool="t")


def test_labeled_array_choices_name_the_allowed_values() -> None:
    schema = input_schema(
        one(type="checkboxes", options=[{"value": "x", "label": "Ex"}, "y"]), file_mode="local"
    )
    assert invalid(schema, {"p": ["x", "q"]}, tool="t") == (
        "Invalid arguments for tool 't': p[1]: 'q' is not one of ['x', 'y']"
    )


def test_arguments_that_are_not_an_object_are_refused(server_schema: dict[str, Any]) -> None:
    assert (
        invalid(server_schema, ["prompt"])
        == "Invalid arguments for tool 'validate': arguments must be an object"
    )


def test_a_huge_bad_value_is_shortened() -> None:
    schema = input_schema(one(type="number"), file_mode="local")
    assert len(invalid(schema, {"p": "x" * 10_000}, tool="t")) < 300


def test_many_problems_are_counted_past_ten_and_a_huge_key_is_shortened() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}}
    message = invalid(schema, {"p": ["x"] * 40}, tool="t")
    assert message.count("is not of type 'integer'") == 10 and message.endswith("; and 30 more")
    assert len(invalid(schema, {"k" * 10_000: ["x"]}, tool="t")) < 500


def test_a_missing_param_says_its_type_where_its_schema_has_one() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": ["string", "null"]}, "b": {"$ref": "#/$defs/x"}},
        "required": ["a", "b"],
        "$defs": {"x": {"type": "string"}},
    }
    assert invalid(schema, {}, tool="t") == (
        "Invalid arguments for tool 't': "
        "'a' is a required property (type: string or null); 'b' is a required property"
    )


def test_invalid_arguments_map_to_json_rpc_invalid_params(server_schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidArguments) as info:
        validate_arguments(server_schema, {}, tool="validate")
    assert info.value.code == "invalid_params"
    assert info.value.status == 400


def test_validators_are_reused_for_equal_schemas() -> None:
    from webui.validation import schemas

    schema = input_schema(params_of({"name": "cache_probe_unique", "type": "string"}), file_mode="local")
    validate_arguments(schema, {}, tool="t")
    before = schemas._prepared.cache_info().hits
    validate_arguments(copy.deepcopy(schema), {"cache_probe_unique": "x"}, tool="t")
    assert schemas._prepared.cache_info().hits == before + 1


# --------------------------------------------------------------------------- elicitation


ALLOWED_PROPERTY_KEYS = {"type", "title", "description", "default", "format", "enum", "oneOf", "items"}


def assert_mcp_form_property(schema: dict[str, Any]) -> None:
    """A property MCP form elicitation accepts: flat, string-only enums, titled consts."""
    PRIMITIVE.validate_python(schema)
    assert set(schema) <= ALLOWED_PROPERTY_KEYS
    assert schema["type"] in {"string", "number", "boolean", "array"}
    if schema["type"] == "array":
        items = schema["items"]
        assert set(items) <= {"type", "enum", "anyOf"}
        values = items.get("enum") or [c["const"] for c in items["anyOf"]]
        assert all(isinstance(v, str) for v in values)
    for choice in schema.get("oneOf", []):
        assert set(choice) == {"const", "title"}
        assert isinstance(choice["const"], str)


def test_an_elicitable_form_fits_the_mcp_elicitation_subset() -> None:
    params = params_of(
        {"name": "text", "type": "string", "required": True},
        {"name": "when", "type": "string", "format": "date-time"},
        {"name": "count", "type": "number", "default": 2},
        {"name": "ok", "type": "boolean", "default": False},
        {"name": "mode", "type": "string", "options": [{"value": "f", "label": "Fast"}, "slow"]},
        {"name": "plain", "type": "positional", "options": ["a", "b"]},
        {"name": "tags", "type": "checkboxes", "options": ["a", "b"], "default": ["a"]},
        {"name": "many", "type": "string", "multiple": True, "options": [{"value": "x", "label": "Ex"}]},
    )
    assert form_blockers(params) == []
    schema = elicitation_schema(params)
    assert schema["type"] == "object"
    assert schema["required"] == ["text"]
    for name, prop_schema in schema["properties"].items():
        assert prop_schema["title"] == name
        assert_mcp_form_property(prop_schema)
    Draft202012Validator.check_schema(schema)


def test_elicitation_properties_for_each_field_shape() -> None:
    params = params_of(
        {"name": "text", "type": "string", "title": "Your text", "description": "Say it", "default": "hi"},
        {"name": "day", "type": "string", "format": "date"},
        {"name": "count", "type": "number"},
        {"name": "ok", "type": "boolean"},
        {"name": "mode", "type": "string", "options": [{"value": "f", "label": "Fast"}, "slow"]},
        {"name": "plain", "type": "positional", "options": ["a", "b"]},
        {"name": "tags", "type": "checkboxes", "options": ["a", "b"], "default": ["a"]},
        {"name": "many", "type": "string", "multiple": True, "options": [{"value": "x", "label": "Ex"}]},
    )
    assert elicitation_schema(params)["properties"] == {
        "text": {"type": "string", "title": "Your text", "description": "Say it", "default": "hi"},
        "day": {"type": "string", "format": "date", "title": "day"},
        "count": {"type": "number", "title": "count"},
        "ok": {"type": "boolean", "title": "ok"},
        "mode": {
            "type": "string",
            "oneOf": [{"const": "f", "title": "Fast"}, {"const": "slow", "title": "slow"}],
            "title": "mode",
        },
        "plain": {"type": "string", "enum": ["a", "b"], "title": "plain"},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b"]},
            "title": "tags",
            "default": ["a"],
        },
        "many": {"type": "array", "items": {"anyOf": [{"const": "x", "title": "Ex"}]}, "title": "many"},
    }


def test_required_is_omitted_from_an_elicitation_without_required_fields() -> None:
    assert elicitation_schema(one(type="boolean")) == {
        "type": "object",
        "properties": {"p": {"type": "boolean", "title": "p"}},
    }


def test_unrepresentable_fields_become_string_placeholders_instead_of_crashing() -> None:
    params = params_of(
        {"name": "doc", "type": "file", "required": True, "description": "Upload"},
        {"name": "docs", "type": "file", "multiple": True},
        {"name": "names", "type": "string", "multiple": True, "default": ["a"]},
        {"name": "nums", "type": "number", "multiple": True, "options": [1, 2]},
    )
    schema = elicitation_schema(params)
    assert schema["required"] == ["doc"]
    assert schema["properties"] == {
        "doc": {"type": "string", "title": "doc", "description": "Upload"},
        "docs": {"type": "string", "title": "docs"},
        "names": {"type": "string", "title": "names"},
        "nums": {"type": "string", "title": "nums"},
    }


def test_an_answer_to_an_elicitation_form_validates_against_it() -> None:
    params = params_of(
        {"name": "day", "type": "string", "format": "date", "required": True},
        {"name": "tags", "type": "checkboxes", "options": [{"value": "a", "label": "A"}, "b"]},
    )
    schema = elicitation_schema(params)
    assert validate_arguments(schema, {"day": "2024-01-31", "tags": ["b"]}, tool="ask") == {
        "day": "2024-01-31",
        "tags": ["b"],
    }
    assert "tags[0]: 'c' is not one of ['a', 'b']" in invalid(schema, {"day": "2024-01-31", "tags": ["c"]})


# --------------------------------------------------------------------------- form_blockers & field_summary


def test_a_form_of_primitives_and_optioned_multi_selects_has_no_blockers() -> None:
    params = params_of(
        {"name": "a", "type": "string"},
        {"name": "b", "type": "checkboxes", "options": ["x"]},
        {"name": "c", "type": "positional", "multiple": True, "options": ["y"]},
    )
    assert form_blockers(params) == []
    assert form_blockers(()) == []


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"type": "file"}, "'p' is a file field"),
        ({"type": "file", "multiple": True}, "'p' is a file field"),
        ({"type": "string", "multiple": True}, "'p' is a multi-value field without static options"),
        ({"type": "checkboxes"}, "'p' is a multi-value field without static options"),
        ({"type": "number", "multiple": True}, "'p' is a multi-value field without static options"),
        (
            {"type": "number", "multiple": True, "options": [1, 2]},
            "'p' is a multi-value field whose options are not strings",
        ),
    ],
)
def test_fields_that_standard_elicitation_cannot_carry_are_blockers(raw: dict[str, Any], reason: str) -> None:
    assert form_blockers(one(**raw)) == [reason]


def test_the_documented_example_form_lists_every_blocker() -> None:
    assert form_blockers(spec_params()) == [
        "'names' is a multi-value field without static options",
        "'document' is a file field",
        "'attachments' is a file field",
    ]


def test_field_summary_lists_name_type_required_and_title() -> None:
    params = params_of(
        {"name": "doc", "type": "file", "required": True, "title": "Document"},
        {"name": "tags", "type": "checkboxes", "options": ["a"]},
    )
    assert field_summary(params) == [
        {"name": "doc", "type": "file", "required": True, "title": "Document"},
        {"name": "tags", "type": "checkboxes", "required": False, "title": "tags"},
    ]
    assert field_summary(()) == []


@pytest.mark.parametrize(
    ("value", "ok"),
    [("https://example.org/a?b=c", True), ("urn:isbn:0451450523", True), ("not a uri", False)],
)
def test_uri_formats_are_checked(value: str, ok: bool) -> None:
    """`format: uri` in a question's or tool's schema is checked, not taken on trust (the
    format checkers come with jsonschema's format extra)."""
    schema = {"type": "object", "properties": {"site": {"type": "string", "format": "uri"}}}
    if ok:
        assert validate_arguments(schema, {"site": value}, tool="t") == {"site": value}
    else:
        assert f"site: {value!r} is not a 'uri'" in invalid(schema, {"site": value}, tool="t")
