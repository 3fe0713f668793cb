"""The tool contract diff: every kind of change, and which ones break clients on `latest`."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.workflows.test_project import DOCUMENTED_EXAMPLE
from webui.workflows.contract_diff import Change, ToolContract, diff_catalogs, is_breaking, type_of
from webui.workflows.params import parse_params
from webui.workflows.schema import input_schema

OUTPUT = {
    "type": "object",
    "properties": {"runId": {"type": "string"}, "status": {"type": "string"}, "output": {}},
    "required": ["runId", "status"],
}


def tool(
    name: str = "greet", *raw: dict[str, Any], output: dict[str, Any] | None = OUTPUT, **kw: Any
) -> ToolContract:
    """A tool whose input schema is derived from workflow params, as the server lists it."""
    schema = input_schema(parse_params(copy.deepcopy(list(raw)), where="test"), file_mode="server")
    return ToolContract(name=name, input_schema=schema, output_schema=output, **kw)


NAME = {"name": "name", "type": "string", "required": True}
TIMES = {"name": "times", "type": "number", "default": 1}


def diff(old: list[ToolContract], new: list[ToolContract]) -> list[tuple[str, str, str | None, bool]]:
    return [(c.kind, c.tool, c.param, c.breaking) for c in diff_catalogs(old, new)]


def test_the_same_catalog_has_no_changes() -> None:
    params = copy.deepcopy(DOCUMENTED_EXAMPLE["entrypoints"][0]["params"])
    assert diff_catalogs([tool("a", *params)], [tool("a", *params)]) == []
    assert diff_catalogs([], []) == []


def test_a_removed_tool_breaks_and_an_added_one_does_not() -> None:
    changes = diff_catalogs([tool("a", NAME), tool("b")], [tool("b"), tool("c", NAME)])
    assert [(c.kind, c.tool, c.breaking) for c in changes] == [
        ("tool_removed", "a", True),
        ("tool_added", "c", False),
    ]
    assert is_breaking(changes)
    assert changes[0].line() == "BREAKING tool_removed a: tool removed; calls to it fail"
    assert changes[1].line() == "tool_added c: new tool"


def test_everything_is_added_when_there_is_no_previous_version() -> None:
    changes = diff_catalogs([], [tool("a", NAME), tool("b")])
    assert [(c.kind, c.tool) for c in changes] == [("tool_added", "a"), ("tool_added", "b")]
    assert not is_breaking(changes)


def test_a_new_required_param_breaks_and_a_new_optional_one_does_not() -> None:
    lang = {"name": "lang", "type": "string", "required": True}
    assert diff([tool("g", NAME)], [tool("g", NAME, lang, TIMES)]) == [
        ("param_added", "g", "lang", True),
        ("param_added", "g", "times", False),
    ]
    [required, _] = diff_catalogs([tool("g", NAME)], [tool("g", NAME, lang, TIMES)])
    assert required.detail == "new required param (string)"
    assert required.line() == "BREAKING param_added g.lang: new required param (string)"


def test_a_removed_param_breaks_even_when_it_was_optional() -> None:
    assert diff([tool("g", NAME, TIMES)], [tool("g", NAME)]) == [("param_removed", "g", "times", True)]


def test_becoming_required_breaks_and_becoming_optional_does_not() -> None:
    optional = {**NAME, "required": False}
    assert diff([tool("g", optional)], [tool("g", NAME)]) == [("param_changed", "g", "name", True)]
    [change] = diff_catalogs([tool("g", NAME)], [tool("g", optional)])
    assert (change.breaking, change.detail) == (False, "became optional")


@pytest.mark.parametrize(
    ("before", "after", "detail"),
    [
        ({"type": "string"}, {"type": "number"}, "type changed from string to number"),
        (
            {"type": "string"},
            {"type": "string", "multiple": True},
            "type changed from string to array of string",
        ),
        (
            {"type": "file"},
            {"type": "file", "multiple": True},
            "type changed from object{id} to array of object{id}",
        ),
        ({"type": "number"}, {"type": "boolean"}, "type changed from number to boolean"),
    ],
)
def test_a_type_change_breaks(before: dict[str, Any], after: dict[str, Any], detail: str) -> None:
    changes = diff_catalogs([tool("g", {"name": "p", **before})], [tool("g", {"name": "p", **after})])
    # (a file param's description also names one file or several)
    assert [(c.kind, c.param, c.breaking, c.detail) for c in changes if c.breaking] == [
        ("param_changed", "p", True, detail)
    ]


def test_removing_allowed_values_breaks_and_adding_them_does_not() -> None:
    def lang(*values: str, labels: bool = False) -> dict[str, Any]:
        options = [{"value": v, "label": v.upper()} if labels else {"value": v} for v in values]
        return {"name": "lang", "type": "string", "options": options}

    narrowed = diff_catalogs([tool("g", lang("en", "fr"))], [tool("g", lang("en"))])
    assert [(c.breaking, c.detail) for c in narrowed] == [(True, 'values no longer allowed: ["fr"]')]
    widened = diff_catalogs([tool("g", lang("en", labels=True))], [tool("g", lang("en", "de", labels=True))])
    assert [(c.breaking, c.detail) for c in widened] == [(False, 'values added: ["de"]')]
    opened = diff_catalogs([tool("g", lang("en"))], [tool("g", {"name": "lang", "type": "string"})])
    assert [c.breaking for c in opened] == [False]
    closed = diff_catalogs([tool("g", {"name": "lang", "type": "string"})], [tool("g", lang("en"))])
    assert [(c.breaking, c.detail) for c in closed] == [(True, 'only these values allowed now: ["en"]')]


def test_a_new_format_breaks_and_a_dropped_one_does_not() -> None:
    plain = {"name": "day", "type": "string"}
    dated = {"name": "day", "type": "string", "format": "date"}
    assert [c.breaking for c in diff_catalogs([tool("g", plain)], [tool("g", dated)])] == [True]
    assert [c.breaking for c in diff_catalogs([tool("g", dated)], [tool("g", plain)])] == [False]


def test_defaults_titles_and_descriptions_are_changes_that_do_not_break() -> None:
    old = [tool("g", TIMES, title="Greet", description="Say hi")]
    new = [
        tool("g", {**TIMES, "default": 2, "description": "How often"}, title="Greet!", description="Say hi")
    ]
    changes = diff_catalogs(old, new)
    assert [(c.kind, c.param, c.detail) for c in changes] == [
        ("tool_changed", None, "title changed"),
        ("param_changed", "times", "default changed from 1 to 2"),
        ("param_changed", "times", "description changed"),
    ]
    assert not is_breaking(changes)
    no_default = diff_catalogs([tool("g", TIMES)], [tool("g", {"name": "times", "type": "number"})])
    assert [c.detail for c in no_default] == ["default changed from 1 to none"]


def test_output_narrowed_breaks_and_widened_does_not() -> None:
    fewer = {**OUTPUT, "properties": {"runId": {"type": "string"}, "status": {"type": "string"}}}
    assert diff([tool("g", output=OUTPUT)], [tool("g", output=fewer)]) == [
        ("output_changed", "g", "output", True)
    ]
    assert diff([tool("g", output=fewer)], [tool("g", output=OUTPUT)]) == [
        ("output_changed", "g", "output", False)
    ]
    optional = {**OUTPUT, "required": ["runId"]}
    [change] = diff_catalogs([tool("g", output=OUTPUT)], [tool("g", output=optional)])
    assert (change.param, change.breaking, change.detail) == (
        "status",
        True,
        "output property no longer always present",
    )
    retyped = {**OUTPUT, "properties": {**OUTPUT["properties"], "status": {"type": "integer"}}}
    [change] = diff_catalogs([tool("g", output=OUTPUT)], [tool("g", output=retyped)])
    assert (change.breaking, change.detail) == (True, "output type changed from string to integer")
    assert [c.breaking for c in diff_catalogs([tool("g", output=OUTPUT)], [tool("g", output=None)])] == [True]
    assert [c.breaking for c in diff_catalogs([tool("g", output=None)], [tool("g", output=OUTPUT)])] == [
        False
    ]
    described = {**OUTPUT, "description": "what a run returns"}
    assert [c.breaking for c in diff_catalogs([tool("g", output=OUTPUT)], [tool("g", output=described)])] == [
        False
    ]


def test_changes_come_tool_by_tool_in_name_order() -> None:
    old = [tool("b", NAME), tool("a", NAME, TIMES)]
    new = [tool("a", NAME), tool("b", NAME, {"name": "x", "type": "string", "required": True}), tool("c")]
    assert diff(old, new) == [
        ("param_removed", "a", "times", True),
        ("param_added", "b", "x", True),
        ("tool_added", "c", None, False),
    ]


def test_type_of_names_what_a_value_must_be() -> None:
    assert type_of({}) == "any"
    assert type_of({"type": ["string", "null"]}) == '["string", "null"]'
    assert type_of({"type": "array"}) == "array of any"
    assert type_of({"type": "object"}) == "object"


def test_a_change_is_a_plain_value() -> None:
    change = Change("param_added", "g", "p", True, "new required param (string)")
    assert change == Change("param_added", "g", "p", True, "new required param (string)")
