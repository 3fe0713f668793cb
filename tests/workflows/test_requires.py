"""`"requires"` in package.json: the client capabilities an entrypoint's callers must
declare — parsed and checked at load, shown in the structure report and on the MCP page
(escaped), and read per era from what the client declared (webui.mcp.capabilities)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from jinja2_fragments.fastapi import Jinja2Blocks

from tests.helpers import page_templates
from webui.errors import ProjectError
from webui.mcp.capabilities import capability_error, missing_capabilities
from webui.web.mcp_views import ToolView
from webui.workflows.project import CLIENT_CAPABILITIES, load_project, structure_report

PROJECT_ID = "11111111-1111-4111-8111-111111111111"
CAPS = "io.modelcontextprotocol/clientCapabilities"


def _project(root: Path, requires: Any = None, *, given: bool = True) -> Path:
    entrypoint: dict[str, Any] = {"id": "ask", "handler": "ask.py:run"}
    if given:
        entrypoint["requires"] = requires
    package = {"id": PROJECT_ID, "name": "demo", "projectType": "workflow", "entrypoints": [entrypoint]}
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (root / "ask.py").write_text("def run(ctx):\n    return 1\n", encoding="utf-8")
    return root


def _error(root: Path) -> str:
    with pytest.raises(ProjectError) as info:
        load_project(root)
    assert "\n" not in info.value.message
    return info.value.message


def test_every_allowed_capability_loads_in_the_order_written_and_is_reported(tmp_path: Path) -> None:
    assert CLIENT_CAPABILITIES == ("sampling", "elicitation", "roots")
    project = load_project(_project(tmp_path, ["roots", "sampling", "elicitation"]))
    (ep,) = project.entrypoints
    assert ep.requires == ("roots", "sampling", "elicitation")
    (shown,) = structure_report(project)["entrypoints"]
    assert shown["requires"] == ["roots", "sampling", "elicitation"]


@pytest.mark.parametrize("requires", [None, []], ids=["null", "empty"])
def test_absent_null_or_empty_requires_nothing_and_the_report_does_not_show_it(
    tmp_path: Path, requires: Any
) -> None:
    for root, given in ((tmp_path / "given", True), (tmp_path / "absent", False)):
        project = load_project(_project(root, requires, given=given))
        assert project.entrypoints[0].requires == ()
        assert "requires" not in structure_report(project)["entrypoints"][0]


@pytest.mark.parametrize(
    ("requires", "expected"),
    [
        (["tasks"], "entrypoints[0].requires[0]: unknown client capability 'tasks'"),
        (["sampling", "Sampling"], "entrypoints[0].requires[1]: unknown client capability 'Sampling'"),
        ([1], "entrypoints[0].requires[0]: unknown client capability 1"),
        ([{"sampling": {}}], 'entrypoints[0].requires[0]: unknown client capability {"sampling": {}}'),
        (["sampling", "sampling"], "entrypoints[0].requires[1]: 'sampling' is listed twice"),
        ("sampling", "entrypoints[0].requires: expected a list of client capabilities"),
        ({"sampling": {}}, "entrypoints[0].requires: expected a list of client capabilities"),
    ],
)
def test_a_bad_requires_is_refused_at_load_with_one_clear_line(
    tmp_path: Path, requires: Any, expected: str
) -> None:
    message = _error(_project(tmp_path, requires))
    assert expected in message, message
    if "twice" not in expected:
        assert '"sampling", "elicitation", "roots"' in message  # names what is allowed


def test_a_huge_unknown_name_is_clipped_in_the_error(tmp_path: Path) -> None:
    message = _error(_project(tmp_path, ["x" * 5000]))
    assert len(message) < 400


# --------------------------------------------------------------------------- what a client declared


def _ctx(version: str, *, meta_caps: Any = None, session_caps: types.ClientCapabilities | None = None) -> Any:
    params = {"name": "ask", "_meta": {CAPS: meta_caps}} if meta_caps is not None else {"name": "ask"}
    return SimpleNamespace(
        protocol_version=version, params=params, session=SimpleNamespace(client_capabilities=session_caps)
    )


def _ep(tmp_path: Path, *requires: str) -> Any:
    return load_project(_project(tmp_path, list(requires))).entrypoints[0]


def test_at_2026_only_the_requests_own_meta_counts(tmp_path: Path) -> None:
    ep = _ep(tmp_path, "sampling", "roots")
    declared = types.ClientCapabilities(sampling=types.SamplingCapability(), roots=types.RootsCapability())
    assert missing_capabilities(_ctx("2026-07-28", meta_caps={"sampling": {}, "roots": {}}), ep) == ()
    assert missing_capabilities(_ctx("2026-07-28", meta_caps={"roots": {"listChanged": True}}), ep) == (
        "sampling",
    )
    # Not an object: not declared. The session's capabilities play no part in this era.
    assert missing_capabilities(
        _ctx("2026-07-28", meta_caps={"sampling": True}, session_caps=declared), ep
    ) == (
        "sampling",
        "roots",
    )


def test_on_a_2025_session_only_initialize_counts_not_a_requests_meta(tmp_path: Path) -> None:
    ep = _ep(tmp_path, "elicitation")
    spoofed = {"elicitation": {}}
    assert missing_capabilities(_ctx("2025-11-25", meta_caps=spoofed), ep) == ("elicitation",)
    none_declared = types.ClientCapabilities()
    assert missing_capabilities(_ctx("2025-11-25", meta_caps=spoofed, session_caps=none_declared), ep) == (
        "elicitation",
    )
    declared = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    assert missing_capabilities(_ctx("2025-06-18", session_caps=declared), ep) == ()


def test_an_entrypoint_that_requires_nothing_is_never_refused(tmp_path: Path) -> None:
    ep = _ep(tmp_path)
    assert missing_capabilities(_ctx("2026-07-28", meta_caps={}), ep) == ()
    assert missing_capabilities(_ctx("2025-11-25"), ep) == ()


def test_the_error_names_each_missing_capability_as_an_object(tmp_path: Path) -> None:
    error = capability_error(_ep(tmp_path, "sampling", "roots"), ("sampling", "roots"))
    assert error.code == -32021
    assert error.error.data == {"requiredCapabilities": {"sampling": {}, "roots": {}}}
    assert "sampling" in error.error.message and "roots" in error.error.message


# --------------------------------------------------------------------------- the MCP page


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Jinja2Blocks:
    return page_templates(tmp_path_factory.mktemp("templates"))


def _rendered(templates: Jinja2Blocks, view: ToolView) -> str:
    template = templates.env.get_template("projects/_tool.html")
    page = SimpleNamespace(label="draft")
    user = SimpleNamespace(csrf_token="token")
    record = SimpleNamespace(id=PROJECT_ID)
    return template.render(t=view, try_state=None, target=page, user=user, record=record, request=None)


def test_the_mcp_page_shows_what_a_tool_requires_next_to_it_escaped(templates: Jinja2Blocks) -> None:
    view = ToolView(
        dom="t1",
        name="ask",
        title="<b>Ask</b>",
        description=None,
        params=[],
        schema={},
        schema_json="{}",
        fields=[],
        requires=("sampling", "<script>x</script>"),
    )
    html = _rendered(templates, view)
    assert "Requires a client that declares: <code>sampling</code>" in html
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    plain = _rendered(templates, ToolView(**{**view.__dict__, "requires": ()}))
    assert "Requires a client" not in plain


@pytest.mark.parametrize(
    ("task", "said"),
    [
        ("required", 'always (<code>"task": "required"</code>)'),
        ("never", 'never (<code>"task": "never"</code>)'),
        ("optional", "declares the tasks extension and the run neither ends nor asks first"),
    ],
)
def test_the_mcp_page_says_when_a_tools_call_becomes_a_task(
    templates: Jinja2Blocks, task: str, said: str
) -> None:
    view = ToolView(
        dom="t1",
        name="t",
        title=None,
        description=None,
        params=[],
        schema={},
        schema_json="{}",
        fields=[],
        task=task,
    )
    assert said in _rendered(templates, view)
