"""`configuration.fields[]` in package.json: every malformed declaration is one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webui.errors import ProjectError
from webui.workflows.configuration import (
    ConfigField,
    fields_digest,
    load_config_fields,
    parse_config_fields,
    value_problems,
)
from webui.workflows.project import load_project

PROJECT = "5f0c8a52-3a55-4f7b-9d0e-0a1b2c3d4e5f"


def parse(fields: object) -> tuple[ConfigField, ...]:
    return parse_config_fields({"configuration": {"fields": fields}}, "package.json")


def test_every_field_type_parses():
    fields = parse(
        [
            {"name": "s", "type": "string", "default": "x", "description": "d"},
            {"name": "n", "type": "number", "required": True},
            {"name": "b", "type": "boolean", "default": False},
            {"name": "sel", "type": "select", "options": ["a", {"value": "b", "label": "Bee"}]},
            {"name": "multi", "type": "multiselect", "options": ["a", "b"], "default": ["a"]},
            {"name": "d", "type": "date", "default": "2026-12-01"},
            {"name": "key", "type": "secret", "required": True},
        ]
    )
    assert [f.name for f in fields] == ["s", "n", "b", "sel", "multi", "d", "key"]
    assert fields[3].options[1].title == "Bee"
    assert fields[6].secret


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "configuration.fields: expected a list"),
        (["x"], "fields[0]: expected a field object"),
        ([{"type": "string"}], "fields[0].name: is required"),
        ([{"name": "1x", "type": "string"}], "invalid field name"),
        ([{"name": "x"}], "fields[0].type: is required"),
        ([{"name": "x", "type": "color"}], "unknown field type 'color'"),
        ([{"name": "x", "type": "string"}, {"name": "x", "type": "number"}], "fields[1].name: duplicate"),
        ([{"name": "x", "type": "select"}], "needs a non-empty list of options"),
        ([{"name": "x", "type": "select", "options": ["a", "a"]}], "duplicate option"),
        ([{"name": "x", "type": "string", "options": ["a"]}], "only select and multiselect"),
        ([{"name": "x", "type": "number", "default": "3"}], "fields[0].default: expected a number"),
        ([{"name": "x", "type": "date", "default": "1 Dec"}], "expected a date"),
        ([{"name": "x", "type": "select", "options": ["a"], "default": "b"}], "not one of the options"),
        ([{"name": "x", "type": "secret", "default": "pw"}], "a secret field cannot have a default"),
        ([{"name": "x", "type": "string", "required": "yes"}], "expected true or false"),
    ],
)
def test_bad_declarations_name_the_field(fields, message):
    with pytest.raises(
        ProjectError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")
    ):
        parse(fields)


def test_configuration_must_be_an_object():
    with pytest.raises(ProjectError, match="configuration: expected an object"):
        parse_config_fields({"configuration": []}, "package.json")


def test_value_problems_cover_unknown_wrong_and_missing():
    fields = parse(
        [
            {"name": "n", "type": "number", "required": True},
            {"name": "m", "type": "multiselect", "options": ["a"]},
        ]
    )
    assert value_problems(fields, {"n": 1}) == {}
    problems = value_problems(fields, {"m": ["a", "a"], "zz": 1})
    assert set(problems) == {"n", "m", "zz"}


def test_the_digest_follows_the_declaration():
    one = parse([{"name": "n", "type": "number"}])
    assert fields_digest(one) == fields_digest(parse([{"name": "n", "type": "number"}]))
    assert fields_digest(one) != fields_digest(parse([{"name": "n", "type": "string"}]))


def test_any_project_type_with_an_id_declares_fields(tmp_path: Path):
    doc = {
        "id": PROJECT,
        "name": "board",
        "projectType": "kanban",
        "configuration": {"fields": [{"name": "lanes", "type": "number", "default": 3}]},
    }
    (tmp_path / "package.json").write_text(json.dumps(doc))
    project_id, fields = load_config_fields(tmp_path)
    assert project_id == PROJECT and [f.name for f in fields] == ["lanes"]
    with pytest.raises(ProjectError, match="not a workflow project"):
        load_project(tmp_path)
