"""The pages reach what the app holds only through its typed state and their dependencies
(webui/web/state.py, webui/web/deps.py), and the templates name the app's routes instead of
writing their paths (`url("name", param=value)`, webui/web/templating.py)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import NoMatchFound

from webui.app import create_app
from webui.settings import Settings
from webui.web.state import NotStarted, app_state, running_state
from webui.web.templating import TEMPLATES_DIR, route_paths

ROOT = Path(__file__).resolve().parents[2]
# The modules that may touch Starlette's `app.state`: the one that owns the typed state.
STATE_OWNERS = {ROOT / "webui" / "web" / "state.py"}
# A quoted string that starts like a path of this app. Allowed: the static files and the
# built docs site (files served as they are, not routes), and other sites (`//host`).
LITERAL_PATH = re.compile(r"""["'](/(?!/|static/|help/)[^"'\s]*)""")
URL_CALL = re.compile(r"""\burl\(\s*'([a-z_]+)'((?:\s*,\s*\w+\s*=)?[^)]*)\)""")
PARAM_NAME = re.compile(r"\b(\w+)\s*=")


def _app_state_reads(path: Path) -> list[int]:
    """Lines of `path` that read `<something>.app.state`, `app.state` or `scope["app"].state`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "state":
            owner = node.value
            if (
                (isinstance(owner, ast.Attribute) and owner.attr == "app")
                or (isinstance(owner, ast.Name) and owner.id == "app")
                or (
                    isinstance(owner, ast.Subscript)
                    and isinstance(owner.slice, ast.Constant)
                    and owner.slice.value == "app"
                )
            ):
                lines.append(node.lineno)
    return lines


def _web_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "webui" / "web").rglob("*.py") if p not in STATE_OWNERS)


def _templates() -> list[Path]:
    return sorted(TEMPLATES_DIR.rglob("*.html"))


def test_no_page_module_reads_the_app_state_except_through_its_typed_accessor() -> None:
    reads = {f"{path.relative_to(ROOT)}:{line}" for path in _web_modules() for line in _app_state_reads(path)}
    assert not reads, f"read the app's state through webui.web.deps (or app_state), not app.state: {reads}"


def test_no_template_writes_a_path_of_the_app() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(1)}"
        for path in _templates()
        for text in [path.read_text()]
        for m in LITERAL_PATH.finditer(text)
    ]
    assert not found, "name the route instead: url('route_name', param=value)\n" + "\n".join(found)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    return create_app(Settings(data_dir=tmp_path_factory.mktemp("named-routes")))  # never started


def test_a_name_a_template_uses_means_one_route(app: FastAPI) -> None:
    names = Counter(ctx.name for ctx in iter_route_contexts(app.routes))
    used = {m.group(1) for path in _templates() for m in URL_CALL.finditer(path.read_text())}
    assert {name: names[name] for name in used if names[name] != 1} == {}


def test_every_route_a_template_names_exists_with_the_params_it_is_given(app: FastAPI) -> None:
    url = route_paths(app.router)
    calls = {
        (m.group(1), tuple(sorted(PARAM_NAME.findall(m.group(2)))))
        for path in _templates()
        for m in URL_CALL.finditer(path.read_text())
    }
    assert len(calls) > 40  # the templates do use it
    for name, params in sorted(calls):
        assert url(name, **dict.fromkeys(params, "x")).startswith("/"), name


def test_a_value_is_one_segment_however_it_is_spelt(app: FastAPI) -> None:
    url = route_paths(app.router)
    assert url("run_page", run_id="run_1") == "/runs/run_1"
    assert url("run_page", run_id="../x?y=1#z 100%") == "/runs/..%2Fx%3Fy=1%23z%20100%25"
    assert url("run_page", run_id="child<") == "/runs/child<"  # escaped as HTML by the template
    assert url("run_page", run_id="") == "/runs/"
    assert url("try_outcome", project_id="p", call_id="c") == "/projects/p/mcp/try/c"
    with pytest.raises(NoMatchFound):
        url("no_such_route")
    with pytest.raises(NoMatchFound):
        url("run_page")  # its param missing
    with pytest.raises(NoMatchFound):
        url("run_page", run_id="r", extra="1")


def test_the_state_exists_only_once_the_lifespan_built_it(app: FastAPI) -> None:
    assert running_state(app) is None
    with pytest.raises(NotStarted):
        app_state(app)
