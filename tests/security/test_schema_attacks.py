"""Hostile schemas a project writes itself (an entrypoint's `inputSchema`, a `ctx.ask`
schema): deeply nested or huge documents, references to other documents (nothing is ever
fetched), regular expressions that backtrack catastrophically in Python's `re` (linear on
RE2; what RE2 cannot run is refused), and titles that are markup — refused at load or when
asked, bounded, or shown as escaped text (the MCP page's schema and parameter table, the
browser's question form)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from tests.fixtures.hostile_server import HOSTILE
from tests.helpers import page_templates
from tests.workflows.test_project import load_error, minimal_package, write_project
from webui.errors import ProjectError
from webui.mcp.catalog import Catalog
from webui.validation import NO_RETRIEVAL, SchemaUnusable, field_errors, problems, validator
from webui.web import forms
from webui.web.mcp_clients import pretty_json
from webui.web.mcp_views import ToolView
from webui.workflows.json_schema import check_ask_schema, check_input_schema
from webui.workflows.project import load_project

# Patterns that backtrack catastrophically in Python's `re`, each with a text that makes it
# do so (hours at these lengths): linear on RE2.
CATASTROPHIC = [
    ("^(a+)+$", "a" * 50_000 + "!"),
    ("^(a|aa)*$", "a" * 50_000 + "!"),
    ("(.*a){12}", "a" * 11 + "b" * 50_000),
    ("^(\\w+\\s?)*$", "a" * 50_000 + "!"),
    ("((ab)*)+c", "ab" * 25_000),
    ("(x+x+)+y", "x" * 50_000),
    ("(a|a)*b", "a" * 50_000),
]
# What RE2 cannot run at all.
UNRUNNABLE = ["(.)\\1", "(?<n>a)\\k<n>", "a(?=b)", "(?!x)y", "(?<=a)b", "(?<!a)b"]


def with_schema(tmp_path: Path, schema: Any) -> Path:
    package = minimal_package()
    package["entrypoints"][0]["inputSchema"] = schema
    return write_project(tmp_path / "p", package)


def test_a_schema_nested_thousands_deep_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    text = '{"type": "object", "properties": {"a": ' + '{"items": ' * 5000 + "{}" + "}" * 5000 + "}}"
    package = json.dumps(minimal_package())
    package = package.replace(
        '"handler": "validate.py:run"', f'"handler": "validate.py:run", "inputSchema": {text}'
    )
    root = write_project(tmp_path / "p", package)
    assert "nested deeper than" in load_error(root)
    deep: dict[str, Any] = {}
    for _ in range(10_000):
        deep = {"not": deep}
    started = time.monotonic()
    with pytest.raises(ProjectError, match=r"not a JSON document|nested more than"):
        check_input_schema({"type": "object", "properties": {"a": deep}}, "s")
    assert time.monotonic() - started < 5


def test_huge_schemas_are_refused_by_size_and_by_count(tmp_path: Path) -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    assert "bytes of JSON, more than" in load_error(with_schema(tmp_path, wide))
    many = {"type": "object", "allOf": [{} for _ in range(4500)]}
    with pytest.raises(ProjectError, match="more than 4000 objects and arrays"):
        check_input_schema(many, "s")
    with pytest.raises(ProjectError, match="more than 100 fields"):
        check_ask_schema(
            {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(101)}}, "q"
        )


@pytest.mark.parametrize(
    "ref",
    [
        "https://example.com/schema.json",
        "http://127.0.0.1:9/x#/a",
        "file:///etc/passwd",
        "other.json",
        "/abs/path.json#/x",
        "urn:uuid:5d1d1e2e-0000-4000-8000-000000000000",
    ],
)
def test_a_reference_to_another_document_is_refused_at_load(tmp_path: Path, ref: str) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    assert "is not local" in load_error(with_schema(tmp_path, schema))
    # also hidden in a $defs entry, or rebased by $id
    nested = {"type": "object", "$defs": {"x": {"allOf": [{"$ref": ref}]}}}
    assert "is not local" in load_error(with_schema(tmp_path, nested))
    rebased = {"type": "object", "$id": ref, "properties": {"a": {"$ref": "#/$defs/x"}}}
    message = load_error(with_schema(tmp_path, rebased))
    assert "/$id: not supported" in message or "/$id: not valid JSON Schema 2020-12" in message


def test_validators_never_fetch_a_remote_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    fetched: list[Any] = []

    def no_network(*args: Any, **kwargs: Any) -> Any:
        fetched.append(args)
        raise AssertionError("a schema reference was fetched")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/evil.json"}}}
    with pytest.raises(SchemaUnusable, match="points to nothing in the schema"):
        validator(schema)
    with pytest.raises(Unresolvable):  # jsonschema's own validator, with the same empty registry
        list(Draft202012Validator(schema, registry=NO_RETRIEVAL).iter_errors({"a": 1}))
    assert field_errors(schema, {"a": 1}) == {}  # a schema that cannot be used judges nothing
    assert fetched == []


@pytest.mark.parametrize(("pattern", "text"), CATASTROPHIC)
def test_a_catastrophic_pattern_for_pythons_re_is_taken_and_checked_by_re2_in_linear_time(
    pattern: str, text: str
) -> None:
    schema = json.loads(
        check_input_schema(
            {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}, "s"
        )
    )
    (error,) = problems(schema, {"a": text})  # within the check's deadline, or CheckRefused
    assert "does not match" in error.message and len(error.message) < 300
    keyed = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    assert problems(check_and_load(keyed), {text: "x"}) == []  # the key does not match: not checked


def check_and_load(schema: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(check_input_schema(schema, "s"))
    return loaded


@pytest.mark.parametrize("pattern", UNRUNNABLE)
def test_a_pattern_re2_cannot_run_is_refused_in_both_kinds_of_schema(tmp_path: Path, pattern: str) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    assert "/properties/a/pattern: refused:" in load_error(with_schema(tmp_path, schema))
    keyed = {"type": "object", "patternProperties": {pattern: {"type": "string"}}}
    with pytest.raises(ProjectError, match=r"patternProperties.*refused"):
        check_input_schema(keyed, "s")
    names = {"type": "object", "propertyNames": {"pattern": pattern}}
    with pytest.raises(ProjectError, match="propertyNames/pattern: refused"):
        check_input_schema(names, "s")
    with pytest.raises(ProjectError, match="'pattern' is not part of an elicitation form field"):
        check_ask_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}, "q")


def test_a_long_pattern_is_refused_and_an_accepted_one_stays_fast() -> None:
    with pytest.raises(ProjectError, match="a pattern of 600 characters"):
        check_input_schema(
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "a" * 600}}}, "s"
        )
    schema_text = check_input_schema(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.[a-z]{2,}$"}}},
        "s",
    )
    started = time.monotonic()
    errors = list(validator(json.loads(schema_text)).iter_errors({"a": "a" * 100_000 + "!"}))
    assert errors and time.monotonic() - started < 2


def test_a_broken_schema_is_a_project_error_never_a_crash_later(tmp_path: Path) -> None:
    for schema in (
        {"type": "object", "properties": {"a": {"minimum": "x"}}},
        {"type": "object", "properties": {"a": {"$ref": 5}}},
        {"type": "object", "properties": {"a": {"pattern": 5}}},
    ):
        message = load_error(with_schema(tmp_path, schema))
        assert "not valid JSON Schema 2020-12" in message
    with pytest.raises(SchemaError):
        Draft202012Validator.check_schema({"type": 5})


HOSTILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": HOSTILE,
    "properties": {
        "a": {"type": "string", "title": HOSTILE, "description": HOSTILE, "enum": ["x", HOSTILE]},
        "b": {"type": "string", "oneOf": [{"const": "v", "title": HOSTILE}]},
        "c": {"type": "string", "enum": ["o"], "enumNames": [HOSTILE]},
        "d": {"type": "array", "items": {"anyOf": [{"const": "m", "title": HOSTILE}]}},
        "e": {"type": "integer", "title": HOSTILE, "default": 3},
    },
}
INJECTED = 'hx-post="/admin/users"'


def test_hostile_titles_in_a_question_form_are_escaped_text(tmp_path: Path) -> None:
    schema = check_ask_schema(HOSTILE_SCHEMA, "q")
    env = page_templates(tmp_path / "data").env
    macro = env.get_template("macros/forms.html").module.schema_fields  # type: ignore[attr-defined]
    html = str(macro(forms.fields(schema), {}, {"a": HOSTILE}, "ia_1-"))
    assert INJECTED not in html
    assert "hx-post=&#34;/admin/users&#34;" in html or "hx-post=&quot;/admin/users&quot;" in html


def test_hostile_titles_on_the_mcp_page_are_escaped_json_text(tmp_path: Path) -> None:
    schema = {**HOSTILE_SCHEMA, "description": "</pre><script>alert(1)</script>"}
    package = minimal_package()
    package["entrypoints"][0].update(
        {"inputSchema": schema, "title": HOSTILE, "description": "<img src=x onerror=alert(1)>"}
    )
    catalog = Catalog.build(load_project(write_project(tmp_path / "p", package)), file_mode="server")
    tool = catalog.tools[0]
    view = ToolView(
        dom="t1",
        name=tool.name,
        title=tool.title,
        description=tool.description,
        params=[],
        schema=dict(tool.input_schema),
        schema_json=pretty_json(tool.input_schema),
        fields=forms.fields(dict(tool.input_schema)),
        own_schema=True,
    )
    env = page_templates(tmp_path / "data").env
    html = env.get_template("projects/_tool.html").render(
        t=view,
        try_state=None,
        target=SimpleNamespace(label="draft"),
        try_action="/projects/x/mcp/try",
        user=SimpleNamespace(csrf_token="tok"),
        record=SimpleNamespace(id="x"),
    )
    assert INJECTED not in html and "<script>" not in html and "<img" not in html
    assert "&lt;/pre&gt;&lt;script&gt;" in html
    assert "this tool&#39;s own JSON Schema 2020-12" in html or "this tool's own JSON Schema 2020-12" in html
