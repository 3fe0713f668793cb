"""Loading workflow projects."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from webui.errors import ProjectError
from webui.workflows.params import Option, Param, parse_params
from webui.workflows.project import Entrypoint, Project, load_project, structure_report

PROJECT_ID = "11111111-1111-4111-8111-111111111111"

# A complete package.json in the documented format (every field the format knows).
DOCUMENTED_EXAMPLE: dict[str, Any] = {
    "id": PROJECT_ID,
    "name": "invoice-checker",
    "version": "1.2.0",
    "projectType": "workflow",
    "description": "Checks invoices",
    "entrypoints": [
        {
            "id": "validate",
            "title": "Validate",
            "description": "Validate one invoice",
            "handler": "validate.py:run",
            "timeoutSeconds": 300,
            "params": [
                {"name": "prompt", "type": "string", "required": True, "description": "What to check"},
                {"name": "limit", "type": "number", "default": 3},
                {"name": "strict", "type": "boolean"},
                {
                    "name": "mode",
                    "type": "string",
                    "options": [{"value": "fast", "label": "Fast"}, "thorough"],
                },
                {"name": "tags", "type": "checkboxes", "options": ["a", "b", "c"]},
                {"name": "names", "type": "string", "multiple": True},
                {"name": "due", "type": "string", "format": "date"},
                {"name": "target", "type": "positional"},
                {"name": "document", "type": "file", "required": True},
                {"name": "attachments", "type": "file", "multiple": True},
            ],
        }
    ],
}

Package = dict[str, Any]


def documented_example() -> Package:
    """A fresh deep copy of the documented example, safe to mutate."""
    return copy.deepcopy(DOCUMENTED_EXAMPLE)


def minimal_package(params: list[Any] | None = None) -> Package:
    """The smallest valid workflow package.json, optionally with params."""
    entrypoint: dict[str, Any] = {"id": "validate", "handler": "validate.py:run"}
    if params is not None:
        entrypoint["params"] = params
    return {"id": PROJECT_ID, "name": "demo", "projectType": "workflow", "entrypoints": [entrypoint]}


def write_project(
    root: Path, package: Package | str | None = None, handlers: tuple[str, ...] = ("validate.py",)
) -> Path:
    """Write `package.json` (a dict, or raw text) and handler files into `root`."""
    root.mkdir(parents=True, exist_ok=True)
    if package is None:
        package = minimal_package()
    text = package if isinstance(package, str) else json.dumps(package, indent=2)
    (root / "package.json").write_text(text, encoding="utf-8")
    for handler in handlers:
        path = root / handler
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def run(ctx):\n    return {'ok': True}\n", encoding="utf-8")
    return root


def load_error(root: Path) -> str:
    """The one-line message `load_project` fails with, without the line of package.json it
    names (`<file>:<line>: ` read as `<file>: `; `test_every_problem_is_told_at_once_with_its_line`
    checks the lines)."""
    with pytest.raises(ProjectError) as info:
        load_project(root)
    message = info.value.message
    assert "\n" not in message
    assert str(info.value) == message
    file = package_path(root)
    return re.sub(rf"^{re.escape(file)}:\d+: ", f"{file}: ", message)


def package_path(root: Path) -> str:
    return str(root.resolve() / "package.json")


# --------------------------------------------------------------------------- valid projects


def test_the_documented_example_loads_with_every_field_normalized(tmp_path: Path) -> None:
    project = load_project(write_project(tmp_path / "p", documented_example()))

    assert project.id == PROJECT_ID
    assert project.name == "invoice-checker"
    assert project.version == "1.2.0"
    assert project.description == "Checks invoices"
    assert project.root == (tmp_path / "p").resolve()
    (ep,) = project.entrypoints
    assert ep == Entrypoint(
        id="validate",
        title="Validate",
        description="Validate one invoice",
        handler="validate.py:run",
        timeout_seconds=300,
        params=ep.params,
    )
    assert ep.handler_file == "validate.py"
    assert ep.handler_function == "run"
    by_name = {p.name: p for p in ep.params}
    assert [p.name for p in ep.params] == [p["name"] for p in DOCUMENTED_EXAMPLE["entrypoints"][0]["params"]]
    assert by_name["prompt"] == Param(
        name="prompt", type="string", required=True, description="What to check"
    )
    assert by_name["limit"] == Param(name="limit", type="number", default=3)
    assert by_name["limit"].has_default
    assert by_name["strict"] == Param(name="strict", type="boolean")
    assert by_name["mode"].options == (Option("fast", "Fast"), Option("thorough", None))
    assert by_name["tags"].multiple is True
    assert by_name["tags"].options == (Option("a"), Option("b"), Option("c"))
    assert by_name["names"].multiple is True
    assert by_name["due"].format == "date"
    assert by_name["target"].type == "positional"
    assert by_name["document"] == Param(name="document", type="file", required=True)
    assert by_name["attachments"] == Param(name="attachments", type="file", multiple=True)


def test_a_project_can_be_loaded_from_a_string_path(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    assert load_project(str(root)).root == root.resolve()


def test_the_project_root_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(tmp_path / "p")
    monkeypatch.chdir(tmp_path)
    project = load_project("p")
    assert project.root.is_absolute()
    assert project.root == (tmp_path / "p").resolve()


def test_a_minimal_project_gets_fallback_title_description_and_no_version(tmp_path: Path) -> None:
    project = load_project(write_project(tmp_path / "p"))
    assert project.version is None
    assert project.description == ""
    (ep,) = project.entrypoints
    assert ep.title == "validate"
    assert ep.description == "validate"
    assert ep.timeout_seconds is None
    assert ep.params == ()


def test_an_empty_entrypoint_description_falls_back_to_the_title(tmp_path: Path) -> None:
    package = minimal_package()
    package["entrypoints"][0].update(title="Check it", description="")
    (ep,) = load_project(write_project(tmp_path / "p", package)).entrypoints
    assert ep.title == "Check it"
    assert ep.description == "Check it"


def test_an_uppercase_uuid_is_kept_in_lowercase_canonical_form(tmp_path: Path) -> None:
    package = minimal_package()
    package["id"] = "ABCDEF01-2345-4789-8ABC-DEF012345678"
    assert load_project(write_project(tmp_path / "p", package)).id == "abcdef01-2345-4789-8abc-def012345678"


def test_unknown_keys_everywhere_are_ignored_so_the_format_can_grow(tmp_path: Path) -> None:
    package = minimal_package(
        [{"name": "mode", "type": "string", "x-ui": {"w": 1}, "options": [{"value": "a", "icon": "*"}]}]
    )
    package["futureField"] = [1, 2]
    package["entrypoints"][0]["resolveParams"] = "hooks.py:resolve"
    project = load_project(write_project(tmp_path / "p", package))
    assert project.entrypoints[0].params[0].options == (Option("a"),)


def test_json_null_on_optional_fields_means_absent(tmp_path: Path) -> None:
    package = minimal_package(
        [
            {
                "name": "a",
                "type": "string",
                "required": None,
                "multiple": None,
                "default": None,
                "description": None,
                "title": None,
                "options": None,
                "format": None,
            }
        ]
    )
    package.update(version=None, description=None)
    package["entrypoints"][0].update(title=None, description=None, timeoutSeconds=None, params=None)
    project = load_project(write_project(tmp_path / "p", package))
    assert project.version is None
    assert project.entrypoints[0].params == ()


def test_a_param_label_is_accepted_as_its_title_and_title_wins(tmp_path: Path) -> None:
    params = [
        {"name": "a", "type": "string", "label": "Label A"},
        {"name": "b", "type": "string", "label": "Label B", "title": "Title B"},
    ]
    ep = load_project(write_project(tmp_path / "p", minimal_package(params))).entrypoints[0]
    assert [p.title for p in ep.params] == ["Label A", "Title B"]


def test_a_handler_may_live_in_a_subfolder(tmp_path: Path) -> None:
    package = minimal_package()
    package["entrypoints"][0]["handler"] = "lib/handlers.py:main_2"
    root = write_project(tmp_path / "p", package, handlers=("lib/handlers.py",))
    ep = load_project(root).entrypoints[0]
    assert (ep.handler_file, ep.handler_function) == ("lib/handlers.py", "main_2")


def test_a_fractional_timeout_is_accepted(tmp_path: Path) -> None:
    package = minimal_package()
    package["entrypoints"][0]["timeoutSeconds"] = 0.5
    assert load_project(write_project(tmp_path / "p", package)).entrypoints[0].timeout_seconds == 0.5


@pytest.mark.parametrize(
    ("param", "default"),
    [
        ({"type": "number"}, 2.5),
        ({"type": "number"}, 0),
        ({"type": "boolean"}, False),
        ({"type": "string"}, ""),
        ({"type": "positional"}, "x"),
        ({"type": "string", "format": "date"}, "2024-02-29"),
        ({"type": "string", "format": "date-time"}, "2024-02-29T10:00:00Z"),
        ({"type": "string", "multiple": True}, ["a", "b"]),
        ({"type": "checkboxes", "options": ["a", "b"]}, ["b"]),
        ({"type": "checkboxes"}, []),
        ({"type": "number", "options": [1, 2.5]}, 2.5),
        ({"type": "string", "options": [{"value": "x", "label": "X"}]}, "x"),
        ({"type": "boolean", "options": [True]}, True),
    ],
)
def test_defaults_compatible_with_their_param_are_accepted(
    tmp_path: Path, param: dict[str, Any], default: Any
) -> None:
    package = minimal_package([{"name": "p", **param, "default": default}])
    (loaded,) = load_project(write_project(tmp_path / "p", package)).entrypoints[0].params
    assert loaded.has_default is True
    assert loaded.default == default


def test_project_entrypoint_finds_by_id_or_returns_none(tmp_path: Path) -> None:
    package = minimal_package()
    package["entrypoints"].append({"id": "other.v2", "handler": "validate.py:run"})
    project = load_project(write_project(tmp_path / "p", package))
    assert isinstance(project, Project)
    found = project.entrypoint("other.v2")
    assert found is not None
    assert found.id == "other.v2"
    assert project.entrypoint("missing") is None


def test_loaded_objects_are_immutable(tmp_path: Path) -> None:
    project = load_project(write_project(tmp_path / "p"))
    with pytest.raises(AttributeError):
        project.name = "x"  # type: ignore[misc]


# --------------------------------------------------------------------------- not a workflow project


@pytest.mark.parametrize("project_type", ["conversation", "kanban", "Workflow", "", 1, ["workflow"]])
def test_other_project_types_are_refused_and_never_exposed(tmp_path: Path, project_type: Any) -> None:
    package = minimal_package()
    package["projectType"] = project_type
    root = write_project(tmp_path / "p", package)
    message = load_error(root)
    assert message.startswith(f"{package_path(root)}: projectType: ")
    assert "not a workflow project" in message
    assert "never exposed over MCP" in message


def test_a_missing_project_type_is_refused(tmp_path: Path) -> None:
    package = minimal_package()
    del package["projectType"]
    root = write_project(tmp_path / "p", package)
    assert load_error(root) == (
        f"{package_path(root)}: projectType: missing — not a workflow project "
        '(expected "workflow"), so it is never exposed over MCP'
    )


def test_a_conversation_project_without_an_id_is_still_reported_as_not_a_workflow(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", {"name": "chat", "projectType": "conversation"})
    assert "not a workflow project" in load_error(root)


def test_a_plain_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "main.py").write_text("print('hi')\n", encoding="utf-8")
    message = load_error(root)
    assert message.startswith(f"{root.resolve()}: no package.json")
    assert "not a workflow project" in message


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    assert load_error(tmp_path / "nope") == f"{(tmp_path / 'nope').resolve()}: project folder does not exist"


def test_a_file_instead_of_a_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "package.json"
    path.write_text("{}", encoding="utf-8")
    assert load_error(path) == f"{path.resolve()}: not a folder"


# --------------------------------------------------------------------------- malformed package.json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"id": ', "invalid JSON at line 1, column 8: Expecting value"),
        ('{\n  "id": "x",\n}', "invalid JSON at line 3, column 1: "),
        ('{"id": NaN}', "invalid JSON: NaN is not valid JSON"),
        ('{"id": "a", "id": "b"}', "invalid JSON: duplicate key 'id'"),
        ("[]", "expected a JSON object, got array"),
        ('"workflow"', "expected a JSON object, got string"),
    ],
)
def test_unreadable_package_json_names_the_file_and_position(
    tmp_path: Path, text: str, expected: str
) -> None:
    root = write_project(tmp_path / "p", text)
    message = load_error(root)
    assert message.startswith(f"{package_path(root)}: ")
    assert expected in message


def test_package_json_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p")
    (root / "package.json").write_bytes(b'{"name": "\xff"}')
    assert load_error(root).startswith(f"{package_path(root)}: not valid UTF-8")


def _set(path: str, value: Any) -> Callable[[Package], None]:
    """Mutator setting a dotted path (`entrypoints.0.id`) in a package dict."""

    def mutate(package: Package) -> None:
        target: Any = package
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return mutate


def _delete(path: str) -> Callable[[Package], None]:
    """Mutator deleting a dotted path from a package dict."""

    def mutate(package: Package) -> None:
        target: Any = package
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        del target[last]

    return mutate


def _add_entrypoint(entrypoint: dict[str, Any]) -> Callable[[Package], None]:
    return lambda package: package["entrypoints"].append(entrypoint)


TOP_LEVEL_CASES: list[tuple[Callable[[Package], None], str]] = [
    (_delete("id"), "id: is required (a UUID)"),
    (_set("id", "abc"), "id: 'abc' is not a UUID"),
    (_set("id", 42), "id: 42 is not a UUID"),
    (_set("id", "{11111111-1111-4111-8111-111111111111}"), "is not a UUID"),
    (_set("id", "11111111111141118111111111111111"), "is not a UUID"),
    (_set("id", "11111111-1111-4111-8111-111111111111\n"), "is not a UUID"),
    (_delete("name"), "name: is required"),
    (_set("name", ""), "name: expected a non-empty string, got ''"),
    (_set("name", "   "), "name: expected a non-empty string"),
    (_set("name", 5), "name: expected a non-empty string, got 5"),
    (_set("version", 1), "version: expected a string, got number"),
    (_set("description", ["x"]), "description: expected a string, got array"),
    (_delete("entrypoints"), "entrypoints: is required"),
    (_set("entrypoints", {}), "entrypoints: expected a list of entrypoints, got object"),
    (_set("entrypoints", []), "entrypoints: must list at least one entrypoint"),
    (_set("entrypoints.0", "validate"), "entrypoints[0]: expected an entrypoint object, got string"),
    (_delete("entrypoints.0.id"), "entrypoints[0].id: is required"),
    (_set("entrypoints.0.id", "has space"), "entrypoints[0].id: invalid entrypoint id 'has space'"),
    (_set("entrypoints.0.id", ""), "entrypoints[0].id: invalid entrypoint id ''"),
    (_set("entrypoints.0.id", "a" * 65), "entrypoints[0].id: invalid entrypoint id"),
    (_set("entrypoints.0.id", "tool/x"), "entrypoints[0].id: invalid entrypoint id 'tool/x'"),
    (_set("entrypoints.0.id", 7), "entrypoints[0].id: invalid entrypoint id 7"),
    (
        _add_entrypoint({"id": "validate", "handler": "validate.py:run"}),
        "entrypoints[1].id: duplicate entrypoint id 'validate'",
    ),
    (_set("entrypoints.0.title", 5), "entrypoints[0].title: expected a string, got number"),
    (_set("entrypoints.0.description", {}), "entrypoints[0].description: expected a string, got object"),
    (_delete("entrypoints.0.handler"), 'entrypoints[0].handler: is required ("file.py:function")'),
    (_set("entrypoints.0.handler", 5), 'entrypoints[0].handler: expected a string "file.py:function"'),
    (
        _set("entrypoints.0.handler", "validate.py"),
        "entrypoints[0].handler: 'validate.py' is not of the form",
    ),
    (_set("entrypoints.0.handler", ":run"), "entrypoints[0].handler: ':run' is not of the form"),
    (
        _set("entrypoints.0.handler", "validate.py:"),
        "entrypoints[0].handler: '' is not a valid Python function",
    ),
    (_set("entrypoints.0.handler", "validate.py:1run"), "'1run' is not a valid Python function name"),
    (_set("entrypoints.0.handler", "validate.py:class"), "'class' is not a valid Python function name"),
    (_set("entrypoints.0.handler", "validate.py:a.b"), "'a.b' is not a valid Python function name"),
    (_set("entrypoints.0.handler", "/etc/validate.py:run"), "'/etc/validate.py' must be relative"),
    (_set("entrypoints.0.handler", "C:\\x\\validate.py:run"), "must be relative to the project"),
    (_set("entrypoints.0.handler", "\\x\\validate.py:run"), "must be relative to the project"),
    (_set("entrypoints.0.handler", "../validate.py:run"), "must stay inside the project (no '..')"),
    (_set("entrypoints.0.handler", "sub/../../validate.py:run"), "must stay inside the project"),
    (_set("entrypoints.0.handler", "missing.py:run"), "handler file 'missing.py' does not exist"),
    (_set("entrypoints.0.handler", "validate.txt:run"), "handler file 'validate.txt' must be a .py file"),
    (_set("entrypoints.0.knowledge", "admin"), 'entrypoints[0].knowledge: expected "read" or "write"'),
    (_set("entrypoints.0.knowledge", True), 'entrypoints[0].knowledge: expected "read" or "write"'),
    (_set("entrypoints.0.timeoutSeconds", 0), "entrypoints[0].timeoutSeconds: expected a positive number"),
    (_set("entrypoints.0.timeoutSeconds", -5), "entrypoints[0].timeoutSeconds: expected a positive number"),
    (
        _set("entrypoints.0.timeoutSeconds", "300"),
        "entrypoints[0].timeoutSeconds: expected a positive number",
    ),
    (_set("entrypoints.0.timeoutSeconds", True), "entrypoints[0].timeoutSeconds: expected a positive number"),
    (_set("entrypoints.0.params", {}), "entrypoints[0].params: expected a list of params, got object"),
]


@pytest.mark.parametrize(("mutate", "expected"), TOP_LEVEL_CASES)
def test_malformed_project_fields_name_the_file_and_the_field(
    tmp_path: Path, mutate: Callable[[Package], None], expected: str
) -> None:
    package = minimal_package()
    mutate(package)
    root = write_project(tmp_path / "p", package)
    message = load_error(root)
    assert message.startswith(f"{package_path(root)}: ")
    assert expected in message


def test_a_handler_symlinked_out_of_the_project_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("def run(ctx):\n    pass\n", encoding="utf-8")
    package = minimal_package()
    package["entrypoints"][0]["handler"] = "link.py:run"
    root = write_project(tmp_path / "p", package)
    (root / "link.py").symlink_to(outside)
    assert "handler file 'link.py' resolves outside the project" in load_error(root)


def test_a_handler_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    package = minimal_package()
    package["entrypoints"][0]["handler"] = "pkg.py:run"
    root = write_project(tmp_path / "p", package)
    (root / "pkg.py").mkdir()
    assert "handler file 'pkg.py' does not exist" in load_error(root)


def test_an_unknown_param_type_gets_the_exact_documented_message(tmp_path: Path) -> None:
    params = [
        {"name": "a", "type": "string"},
        {"name": "b", "type": "number"},
        {"name": "c", "type": "strng"},
    ]
    root = write_project(tmp_path / "p", minimal_package(params))
    assert load_error(root) == (
        f"{package_path(root)}: entrypoints[0].params[2].type: unknown param type 'strng' "
        "(expected one of: string, positional, number, integer, boolean, checkboxes, file)"
    )


PARAM_CASES: list[tuple[Any, str]] = [
    ("prompt", "params[0]: expected a param object, got string"),
    ({"type": "string"}, "params[0].name: is required"),
    ({"name": "1abc", "type": "string"}, "params[0].name: invalid param name '1abc'"),
    ({"name": "a-b", "type": "string"}, "params[0].name: invalid param name 'a-b'"),
    ({"name": "", "type": "string"}, "params[0].name: invalid param name ''"),
    ({"name": 3, "type": "string"}, "params[0].name: invalid param name 3"),
    ({"name": "p"}, "params[0].type: is required (expected one of: string, positional"),
    ({"name": "p", "type": "String"}, "params[0].type: unknown param type 'String'"),
    ({"name": "p", "type": ["string"]}, 'params[0].type: unknown param type ["string"]'),
    (
        {"name": "p", "type": "string", "required": "yes"},
        "params[0].required: expected true or false, got string",
    ),
    (
        {"name": "p", "type": "string", "multiple": 1},
        "params[0].multiple: expected true or false, got number",
    ),
    (
        {"name": "p", "type": "checkboxes", "multiple": False},
        "params[0].multiple: checkboxes params are always",
    ),
    (
        {"name": "p", "type": "string", "description": 1},
        "params[0].description: expected a string, got number",
    ),
    ({"name": "p", "type": "string", "title": True}, "params[0].title: expected a string, got boolean"),
    ({"name": "p", "type": "string", "label": []}, "params[0].label: expected a string, got array"),
    ({"name": "p", "type": "string", "format": "time"}, "params[0].format: unknown format 'time'"),
    ({"name": "p", "type": "number", "format": "date"}, "params[0].format: format applies only to string"),
    (
        {"name": "p", "type": "checkboxes", "format": "date"},
        "params[0].format: format applies only to string",
    ),
    (
        {"name": "p", "type": "string", "options": "a,b"},
        "params[0].options: expected a list of options, got string",
    ),
    ({"name": "p", "type": "string", "options": [{}]}, "params[0].options[0].value: is required"),
    (
        {"name": "p", "type": "string", "options": [{"value": "a", "label": 3}]},
        "params[0].options[0].label: expected a string, got number",
    ),
    ({"name": "p", "type": "string", "options": ["a", 1]}, "params[0].options[1]: option 1 is not a string"),
    (
        {"name": "p", "type": "string", "options": [{"value": True}]},
        "params[0].options[0].value: option true is not a string (param type string)",
    ),
    ({"name": "p", "type": "number", "options": ["1"]}, "params[0].options[0]: option '1' is not a number"),
    ({"name": "p", "type": "number", "options": [True]}, "params[0].options[0]: option true is not a number"),
    ({"name": "p", "type": "boolean", "options": [0]}, "params[0].options[0]: option 0 is not true or false"),
    (
        {"name": "p", "type": "checkboxes", "options": [[1]]},
        "params[0].options[0]: option [1] is not a string",
    ),
    ({"name": "p", "type": "string", "options": ["a", "a"]}, "params[0].options[1]: duplicate option 'a'"),
    ({"name": "p", "type": "number", "options": [1, 1.0]}, "params[0].options[1]: duplicate option 1.0"),
    ({"name": "p", "type": "file", "options": ["a"]}, "params[0].options: file params cannot have options"),
    ({"name": "p", "type": "number", "default": "3"}, "params[0].default: '3' is not a number"),
    ({"name": "p", "type": "number", "default": True}, "params[0].default: true is not a number"),
    ({"name": "p", "type": "string", "default": 3}, "params[0].default: 3 is not a string"),
    ({"name": "p", "type": "boolean", "default": "false"}, "params[0].default: 'false' is not true or false"),
    (
        {"name": "p", "type": "string", "multiple": True, "default": "a"},
        "params[0].default: expected an array for a multiple param, got string",
    ),
    ({"name": "p", "type": "checkboxes", "default": "a"}, "params[0].default: expected an array"),
    (
        {"name": "p", "type": "string", "multiple": True, "default": ["a", 2]},
        "params[0].default[1]: 2 is not a",
    ),
    (
        {"name": "p", "type": "checkboxes", "options": ["a", "b"], "default": ["z"]},
        "params[0].default[0]: 'z' is not one of the options ('a', 'b')",
    ),
    (
        {"name": "p", "type": "string", "options": ["fast", "thorough"], "default": "slow"},
        "params[0].default: 'slow' is not one of the options",
    ),
    ({"name": "p", "type": "number", "options": [1, 2], "default": 3}, "params[0].default: 3 is not one of"),
    (
        {"name": "p", "type": "string", "format": "date", "default": "2023-02-30"},
        "params[0].default: '2023-02-30' is not a valid date",
    ),
    (
        {"name": "p", "type": "string", "format": "date", "default": "20240101"},
        "params[0].default: '20240101' is not a valid date",
    ),
    (
        {"name": "p", "type": "string", "format": "date-time", "default": "2024-01-01"},
        "params[0].default: '2024-01-01' is not a valid date-time",
    ),
    (
        {"name": "p", "type": "file", "default": "/tmp/x"},
        "params[0].default: file params cannot have a default",
    ),
]


@pytest.mark.parametrize(("param", "expected"), PARAM_CASES)
def test_malformed_params_name_the_file_and_the_param_field(
    tmp_path: Path, param: Any, expected: str
) -> None:
    root = write_project(tmp_path / "p", minimal_package([param]))
    message = load_error(root)
    assert message.startswith(f"{package_path(root)}: entrypoints[0].")
    assert f"entrypoints[0].{expected}" in message


def test_duplicate_param_names_are_refused(tmp_path: Path) -> None:
    params = [{"name": "a", "type": "string"}, {"name": "a", "type": "number"}]
    root = write_project(tmp_path / "p", minimal_package(params))
    assert (
        load_error(root) == f"{package_path(root)}: entrypoints[0].params[1].name: duplicate param name 'a'"
    )


def test_the_same_param_name_in_two_entrypoints_is_fine(tmp_path: Path) -> None:
    package = minimal_package([{"name": "a", "type": "string"}])
    package["entrypoints"].append(
        {"id": "b", "handler": "validate.py:run", "params": [{"name": "a", "type": "file"}]}
    )
    assert len(load_project(write_project(tmp_path / "p", package)).entrypoints) == 2


def test_errors_in_a_later_entrypoint_point_at_that_entrypoint(tmp_path: Path) -> None:
    package = minimal_package()
    package["entrypoints"].append({"id": "b", "handler": "validate.py:run", "params": [{"name": "x"}]})
    root = write_project(tmp_path / "p", package)
    assert load_error(root).startswith(f"{package_path(root)}: entrypoints[1].params[0].type: is required")


def test_a_huge_bad_value_is_shortened_in_the_message(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", minimal_package([{"name": "p", "type": "x" * 5000}]))
    assert len(load_error(root)) < 400


# --------------------------------------------------------------------------- parse_params


def test_parse_params_prefixes_errors_with_where() -> None:
    with pytest.raises(ProjectError) as info:
        parse_params([{"name": "ok", "type": "string"}, {"name": "x", "type": "nope"}], where="ask(fields)")
    assert info.value.message.startswith("ask(fields)[1].type: unknown param type 'nope'")


def test_parse_params_refuses_a_non_list() -> None:
    with pytest.raises(ProjectError, match=r"^fields: expected a list of params, got object$"):
        parse_params({"name": "x"}, where="fields")


def test_parse_params_treats_none_and_empty_as_no_params() -> None:
    assert parse_params(None, where="f") == ()
    assert parse_params([], where="f") == ()


def test_parse_params_normalizes_ask_fields() -> None:
    params = parse_params(
        [
            {"name": "approve_amount", "type": "number", "required": True, "label": "Amount"},
            {"name": "pick", "type": "checkboxes", "options": [{"value": "x", "label": "Ex"}]},
        ],
        where="fields",
    )
    assert params == (
        Param(name="approve_amount", type="number", required=True, title="Amount"),
        Param(name="pick", type="checkboxes", multiple=True, options=(Option("x", "Ex"),)),
    )


def test_an_empty_options_list_means_no_static_options() -> None:
    (param,) = parse_params([{"name": "p", "type": "checkboxes", "options": []}], where="f")
    assert param.options == ()


def test_option_title_falls_back_to_the_value_as_json() -> None:
    assert Option("fast", "Fast").title == "Fast"
    assert Option("thorough").title == "thorough"
    assert Option(2.5).title == "2.5"
    assert Option(True).title == "true"


# --------------------------------------------------------------------------- structure report


def test_the_structure_report_of_the_documented_example(tmp_path: Path) -> None:
    report = structure_report(load_project(write_project(tmp_path / "p", documented_example())))

    def param(name: str, ptype: str, **extra: Any) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": name,
            "type": ptype,
            "required": False,
            "multiple": False,
            "title": None,
            "description": None,
            "format": None,
            "options": [],
        }
        doc.update(extra)
        return doc

    # The package's and the entrypoint's own fields as written (the handler is never shown).
    package = {key: value for key, value in DOCUMENTED_EXAMPLE.items() if key != "entrypoints"}
    (entrypoint,) = DOCUMENTED_EXAMPLE["entrypoints"]
    shown = {key: entrypoint[key] for key in ("id", "title", "description", "timeoutSeconds")}
    assert report == {
        **package,
        "entrypoints": [
            {
                **shown,
                "task": "optional",
                "resultText": "json",
                "params": [
                    param("prompt", "string", required=True, description="What to check"),
                    param("limit", "number", default=3),
                    param("strict", "boolean"),
                    param(
                        "mode",
                        "string",
                        options=[{"value": "fast", "label": "Fast"}, {"value": "thorough", "label": None}],
                    ),
                    param(
                        "tags",
                        "checkboxes",
                        multiple=True,
                        options=[{"value": v, "label": None} for v in ("a", "b", "c")],
                    ),
                    param("names", "string", multiple=True),
                    param("due", "string", format="date"),
                    param("target", "positional"),
                    param("document", "file", required=True),
                    param("attachments", "file", multiple=True),
                ],
            }
        ],
    }
    assert json.loads(json.dumps(report)) == report


def test_the_structure_report_carries_fallback_titles_and_never_the_handler(tmp_path: Path) -> None:
    report = structure_report(load_project(write_project(tmp_path / "p")))
    assert report["version"] is None
    assert report["description"] == ""
    assert report["entrypoints"] == [
        {
            "id": "validate",
            "title": "validate",
            "description": "validate",
            "timeoutSeconds": None,
            "task": "optional",
            "resultText": "json",
            "params": [],
        }
    ]
    assert "handler" not in json.dumps(report)


def test_the_structure_report_keeps_a_param_title(tmp_path: Path) -> None:
    package = minimal_package([{"name": "a", "type": "string", "label": "Alpha", "default": "x"}])
    report = structure_report(load_project(write_project(tmp_path / "p", package)))
    (param,) = report["entrypoints"][0]["params"]
    assert param["title"] == "Alpha"
    assert param["default"] == "x"
