"""The `integer` param type: package.json defaults and options, the schemas it makes, and
arguments checked against it (`true` is never an integer; `2.0` is, and arrives as 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workflows.test_project import load_error, minimal_package, package_path, write_project
from webui.errors import InvalidArguments, ProjectError
from webui.workflows.params import parse_params
from webui.workflows.project import load_project
from webui.workflows.schema import elicitation_schema, input_schema, validate_arguments


def one(raw: dict[str, Any]) -> Any:
    return parse_params([raw], where="p")[0]


def test_an_integer_param_loads_with_an_integer_default_and_options(tmp_path: Path) -> None:
    root = write_project(
        tmp_path / "p",
        minimal_package(
            [{"name": "n", "type": "integer", "default": 3, "options": [1, 3, {"value": 5, "label": "Five"}]}]
        ),
    )
    (param,) = load_project(root).entrypoints[0].params
    assert (param.type, param.default, [o.value for o in param.options]) == ("integer", 3, [1, 3, 5])


@pytest.mark.parametrize(("default", "shown"), [(True, "true"), (2.0, "2.0"), (2.5, "2.5"), ("2", "'2'")])
def test_an_integer_default_must_be_a_json_integer(tmp_path: Path, default: Any, shown: str) -> None:
    root = write_project(
        tmp_path / "p", minimal_package([{"name": "n", "type": "integer", "default": default}])
    )
    assert load_error(root) == (
        f"{package_path(root)}: entrypoints[0].params[0].default:"
        f" {shown} is not an integer (param type integer)"
    )


def test_integer_options_refuse_booleans_and_floats() -> None:
    with pytest.raises(ProjectError, match=r"p\[0\]\.options\[1\]: option true is not an integer"):
        one({"name": "n", "type": "integer", "options": [1, True]})
    with pytest.raises(ProjectError, match=r"option 1\.5 is not an integer"):
        one({"name": "n", "type": "integer", "options": [1.5]})


def test_integer_schemas_say_integer() -> None:
    params = parse_params(
        [
            {"name": "n", "type": "integer", "required": True, "default": 2},
            {"name": "ns", "type": "integer", "multiple": True},
        ],
        where="p",
    )
    schema = input_schema(params, file_mode="server")
    assert schema["properties"]["n"] == {"type": "integer", "default": 2}
    assert schema["properties"]["ns"] == {"type": "array", "items": {"type": "integer"}}
    assert elicitation_schema(params[:1])["properties"]["n"] == {
        "type": "integer",
        "title": "n",
        "default": 2,
    }


@pytest.mark.parametrize("bad", [1.5, True, "1", None, 1e400])
def test_arguments_that_are_not_integers_are_refused(bad: Any) -> None:
    schema = input_schema(parse_params([{"name": "n", "type": "integer"}], where="p"), file_mode="server")
    with pytest.raises(InvalidArguments, match=r"Invalid arguments for tool 't': n"):
        validate_arguments(schema, {"n": bad}, tool="t")


def test_a_whole_float_is_an_integer_and_arrives_as_an_int() -> None:
    params = parse_params(
        [{"name": "n", "type": "integer"}, {"name": "ns", "type": "integer", "multiple": True}], where="p"
    )
    schema = input_schema(params, file_mode="server")
    args = validate_arguments(schema, {"n": 2.0, "ns": [1.0, 3]}, tool="t")
    assert args == {"n": 2, "ns": [1, 3]}
    assert type(args["n"]) is int and all(type(v) is int for v in args["ns"])
