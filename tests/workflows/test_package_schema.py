"""`package.json`'s JSON Schema (`webui.workflows.package_schema`, the source of the docs
site's reference page) is held to the loader: every key the loader reads is in it, and
every project the loader accepts in the repository fits it, so the page cannot describe a
format the loader does not read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from webui.errors import ProjectError
from webui.workflows import configuration, entrypoint, params, project, related
from webui.workflows.package_json import json_fields
from webui.workflows.package_schema import PACKAGE_JSON_SCHEMA
from webui.workflows.project import load_project

ROOT = Path(__file__).resolve().parents[2]
LOADER_MODULES = (project, entrypoint, params, configuration, related)
# `raw.get("x")`, `data.get("x")`: the top-level keys the loader reads by hand.
READ = re.compile(r"""\.get\("([A-Za-z]+)\"""")
# The parts read as pydantic dataclasses: each field is a key (its JSON name where it has one).
MODELS = (project.Entrypoint, params.Param, configuration.ConfigField, related.RelatedRef)


def _model_keys() -> set[str]:
    return {key for model in MODELS for key in json_fields(model)}


def _properties(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set(node.get("properties", {})) if isinstance(node.get("properties"), dict) else set()
        for value in node.values():
            found |= _properties(value)
        return found
    if isinstance(node, list):
        return set().union(*(_properties(v) for v in node)) if node else set()
    return set()


def _projects() -> list[Path]:
    found = []
    for path in sorted(ROOT.glob("**/package.json")):
        if "node_modules" in path.parts or ".venv" in path.parts:
            continue
        try:
            load_project(path.parent)
        except ProjectError:
            continue  # a fixture the loader refuses on purpose (or another kind of project)
        found.append(path)
    return found


def test_the_schema_is_valid_json_schema_2020_12() -> None:
    Draft202012Validator.check_schema(PACKAGE_JSON_SCHEMA)


def test_every_key_the_loader_reads_is_in_the_schema() -> None:
    read = set()
    for module in LOADER_MODULES:
        source = Path(module.__file__ or "").read_text()
        read |= set(READ.findall(source))
    read |= _model_keys()
    assert {"entrypoints", "handler", "params", "inputSchema", "relatedProjects", "fields"} <= read
    missing = read - _properties(PACKAGE_JSON_SCHEMA)
    assert not missing, f"keys the loader reads that the schema does not describe: {sorted(missing)}"


def test_every_project_the_loader_accepts_in_the_repository_fits_the_schema() -> None:
    projects = _projects()
    assert len(projects) >= 8, projects  # the examples, the docs' examples and the fixtures
    validator = Draft202012Validator(PACKAGE_JSON_SCHEMA)
    for path in projects:
        errors = [e.message for e in validator.iter_errors(json.loads(path.read_text()))]
        assert not errors, f"{path}: {errors}"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"projectType": "kanban"}, "projectType"),
        ({"id": "not-a-uuid"}, "id"),
        ({"entrypoints": []}, "entrypoints"),
        ({"entrypoints": [{"id": "a b", "handler": "main.py:greet"}]}, "id"),
        ({"entrypoints": [{"id": "a", "handler": "main.py:greet", "task": "sometimes"}]}, "task"),
        (
            {
                "entrypoints": [
                    {"id": "a", "handler": "main.py:greet", "params": [{"name": "x", "type": "text"}]}
                ]
            },
            "type",
        ),
    ],
)
def test_what_the_loader_refuses_the_schema_refuses_too(change: dict[str, Any], where: str) -> None:
    doc = json.loads((ROOT / "docs/examples/first-project/package.json").read_text()) | change
    errors = list(Draft202012Validator(PACKAGE_JSON_SCHEMA).iter_errors(doc))
    assert errors, f"the schema takes {change}"
    assert any(where in [str(p) for p in e.absolute_path] or where in e.message for e in errors), errors
