"""The parts of `package.json` read as pydantic dataclasses (`Entrypoint`, `Param`,
`ConfigField`, `RelatedRef`): each one-line problem names the first field in reading order,
the Python names of fields package.json spells otherwise are never read from the file, a
hostile file stays bounded (the strict reader's limits, then the caps, before any item is
validated), and the reference's schema comes from the same fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.workflows.test_project import minimal_package, write_project
from webui.errors import ProjectError
from webui.workflows.configuration import ConfigField, parse_config_fields, value_problem
from webui.workflows.entrypoint import Entrypoint
from webui.workflows.package_schema import PACKAGE_JSON_SCHEMA
from webui.workflows.params import HEADER_TYPES, Param, parse_params
from webui.workflows.project import load_project, read_project
from webui.workflows.related import RelatedRef


def _entrypoint_with(tmp_path: Path, **fields: Any) -> Entrypoint:
    package = minimal_package()
    package["entrypoints"][0].update(fields)
    (entrypoint,) = load_project(write_project(tmp_path / "p", package)).entrypoints
    return entrypoint


def test_the_python_names_of_renamed_fields_are_not_read_from_the_file(tmp_path: Path) -> None:
    entrypoint = _entrypoint_with(
        tmp_path,
        timeout_seconds=-1,
        result_text="bogus",
        input_schema={"type": "string"},
        knowledge_write=True,
    )
    assert entrypoint.timeout_seconds is None
    assert entrypoint.result_text == "json"
    assert entrypoint.input_schema is None
    assert entrypoint.knowledge_write is False


def test_the_json_names_are_read(tmp_path: Path) -> None:
    entrypoint = _entrypoint_with(tmp_path, timeoutSeconds=5, resultText="output", knowledge="write")
    assert (entrypoint.timeout_seconds, entrypoint.result_text, entrypoint.knowledge_write) == (
        5,
        "output",
        True,
    )


def test_null_is_absent_but_not_for_fields_whose_default_is_a_value(tmp_path: Path) -> None:
    entrypoint = _entrypoint_with(tmp_path, title=None, description=None, timeoutSeconds=None, params=None)
    assert (entrypoint.title, entrypoint.description, entrypoint.params) == ("validate", "validate", ())
    with pytest.raises(
        ProjectError, match=r'entrypoints\[0\]\.task: expected "never", "optional" or "required", got null'
    ):
        _entrypoint_with(tmp_path / "q", task=None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "1x", "type": "color", "required": "no"}, "fields[0].name: invalid param name '1x'"),
        ({"name": "x", "type": "color", "required": "no"}, "fields[0].type: unknown param type 'color'"),
        ({"name": "x", "type": "string", "required": "no", "format": "time"}, "fields[0].required: expected"),
        (
            {"name": "x", "type": "number", "format": "date", "options": "a", "default": True},
            "fields[0].format: format applies only to string and positional params, not number",
        ),
        (
            {"name": "x", "type": "number", "options": [1, "a"], "default": True},
            "fields[0].options[1]: option",
        ),
        ({"name": "x", "type": "number", "options": [1, 2], "default": [1]}, "fields[0].default: [1] is not"),
    ],
)
def test_the_first_problem_in_reading_order_is_told(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ProjectError) as err:
        parse_params([raw], where="fields")
    assert err.value.message.startswith(message), err.value.message


def test_a_problem_deep_in_an_input_schema_continues_the_field_path(tmp_path: Path) -> None:
    with pytest.raises(ProjectError) as err:
        _entrypoint_with(tmp_path, inputSchema={"type": "string"})
    assert (
        'entrypoints[0].inputSchema/type: a tool\'s input schema must be "type": "object"'
        in err.value.message
    )
    with pytest.raises(ProjectError) as both:
        _entrypoint_with(
            tmp_path / "q", inputSchema={"type": "object"}, params=[{"name": "a", "type": "string"}]
        )
    assert "entrypoints[0]: give params or inputSchema, not both" in both.value.message


def test_a_hostile_field_list_is_refused_by_its_cap_before_any_field_is_validated() -> None:
    fields = [{"name": "x", "type": "string"}] * 1_000_000  # duplicates: each would be a problem
    with pytest.raises(ProjectError, match=r"configuration\.fields: at most 200 fields, got 1000000"):
        parse_config_fields({"configuration": {"fields": fields}}, "package.json")


def test_a_hostile_nesting_is_refused_by_the_strict_reader_before_any_model(tmp_path: Path) -> None:
    package = json.dumps(minimal_package())[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    reading = None
    with pytest.raises(ProjectError, match="invalid JSON"):
        reading = read_project(write_project(tmp_path / "p", package))
    assert reading is None


def test_parts_built_in_code_take_their_fields_as_given() -> None:
    param = Param(name="pick", type="checkboxes", options=())
    assert param.multiple is True and not param.has_default
    assert RelatedRef("docs", "22222222-2222-4222-8222-22222222222A").id.endswith("a")
    entrypoint = Entrypoint(id="tool", title="Tool", description="", handler="h.py:f", timeout_seconds=None)
    assert (entrypoint.handler_file, entrypoint.handler_function, entrypoint.task) == (
        "h.py",
        "f",
        "optional",
    )


@pytest.mark.parametrize(
    ("model", "name"),
    [
        (Entrypoint, "entrypoint"),
        (Param, "param"),
        (ConfigField, "configField"),
        (RelatedRef, "relatedProject"),
    ],
)
def test_the_reference_describes_every_field_of_each_part(model: type, name: str) -> None:
    part = PACKAGE_JSON_SCHEMA["$defs"][name]
    keys = {
        info.validation_alias if isinstance(info.validation_alias, str) else field
        for field, info in model.__pydantic_fields__.items()
    }
    assert set(part["properties"]) == keys
    assert all(prop.get("description") for prop in part["properties"].values()), part
    assert part["description"] and "title" not in part


def test_the_header_description_names_the_param_types_a_header_may_mirror() -> None:
    described = PACKAGE_JSON_SCHEMA["$defs"]["param"]["properties"]["header"]["description"]
    assert f"Single {', '.join(sorted(HEADER_TYPES))} params only" in described


class _Counted(str):
    """A string that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_long_default_or_value_is_matched_to_the_options_in_linear_comparisons() -> None:
    n = 2000
    options = [f"o{i}" for i in range(n)]
    _Counted.compared = 0
    (param,) = parse_params(
        [{"name": "x", "type": "checkboxes", "options": options, "default": [_Counted(o) for o in options]}],
        where="fields",
    )
    assert param.has_default and _Counted.compared <= 4 * n
    field = ConfigField(name="x", type="multiselect", options=param.options)
    _Counted.compared = 0
    assert value_problem(field, [_Counted(o) for o in options]) is None
    assert _Counted.compared <= 4 * n
