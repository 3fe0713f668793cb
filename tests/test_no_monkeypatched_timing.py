"""No test changes a timing constant of the product in place: a wait a test needs shorter (or
longer) is a setting (`webui/settings.py`, `STEAMHARNESS_…`) given to the app, or a parameter
the code it calls takes (the app passes the setting's value), never a module constant
monkeypatched, `mock.patch`ed or assigned (CONTRIBUTING.md, "Tests"). Read from the source: a
name with SECONDS, INTERVAL, TIMEOUT or DELAY in it, set through `monkeypatch.setattr`,
`setattr`, `mock.patch`/`patch.object`, or assigned on a module imported from `webui` — in a
test, or in a script a test runs in a child process."""

from __future__ import annotations

import ast
import os
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SKIPPED = {"node_modules", "__pycache__", ".venv"}
TIMING = re.compile(r"SECONDS|INTERVAL|TIMEOUT|DELAY", re.IGNORECASE)
SETTERS = {"setattr", "patch", "object"}  # monkeypatch.setattr, setattr, mock.patch, patch.object


def _constant(name: str) -> bool:
    """A module-level constant's name (upper case) about time."""
    return name.isupper() and TIMING.search(name) is not None


def _target_name(call: ast.Call) -> str | None:
    """The attribute a setter call changes: `setattr(obj, "NAME", v)`, `patch.object(obj, "NAME")`,
    `monkeypatch.setattr("pkg.mod.NAME", v)`, `patch("pkg.mod.NAME")`."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in SETTERS or not call.args:
        return None
    texts = [a.value for a in call.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not texts:
        return None
    if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        return call.args[1].value  # (obj, "NAME", ...)
    return texts[0].rsplit(".", 1)[-1]  # ("pkg.mod.NAME", ...)


def _webui_modules(tree: ast.Module) -> set[str]:
    """The local names bound to modules (or objects) imported from webui."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "webui":
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "webui":
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


# A source none of whose text could be such a change is not parsed (most are not): a timing
# name quoted (the setters name it in a string) or assigned on an attribute.
_NAME = r"[A-Z0-9_]*(?:SECONDS|INTERVAL|TIMEOUT|DELAY)[A-Z0-9_]*"
MAYBE = re.compile(rf"""["'][\w.]*{_NAME}["']|\.{_NAME}\s*(?::[^=\n]*)?[-+*/%]?=(?!=)""")


def monkeypatched_timing(source: str) -> list[tuple[int, str]]:
    """(line, name) of each timing constant `source` changes in place, in the source's order."""
    return sorted(_changes(source)) if MAYBE.search(source) else []


def _changes(source: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    tree = ast.parse(source)
    ast.increment_lineno(tree, first_line - 1)
    ours = _webui_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "webui" in node.value:
            yield from _script_changes(node.value, node.lineno)
        elif isinstance(node, ast.Call):
            name = _target_name(node)
            if name is not None and _constant(name):
                yield node.lineno, name
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and _constant(target.attr)
                    and isinstance(target.value, ast.Name | ast.Attribute)
                    and ast.unparse(target.value).split(".")[0] in ours
                ):
                    yield node.lineno, target.attr


def _script_changes(text: str, line: int) -> Iterator[tuple[int, str]]:
    """What a script a test runs in a child (`python -c SCRIPT`) changes in place."""
    try:
        yield from _changes(textwrap.dedent(text), line)
    except (SyntaxError, ValueError):
        return  # not Python


def _test_sources() -> Iterator[Path]:
    """Every Python file of the tests but this one (its examples are the scan's own test)."""
    for folder, subfolders, files in os.walk(TESTS):
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED)  # node_modules is large
        for name in sorted(files):
            path = Path(folder, name)
            if name.endswith(".py") and path != Path(__file__).resolve():
                yield path


def test_no_test_monkeypatches_a_timing_constant() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}: {name}"
        for path in _test_sources()
        for line, name in monkeypatched_timing(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "timing constants changed in place (make each a setting, or a parameter the app passes"
        " the setting to):\n" + "\n".join(found)
    )


def test_the_scan_reads_the_tests_it_guards() -> None:
    names = {path.name for path in _test_sources()}
    assert {"test_conversations.py", "test_insights_attacks.py", "test_sampler.py"} <= names


def test_the_scan_finds_every_way_to_change_a_timing_constant() -> None:
    source = textwrap.dedent(
        """
        from unittest import mock
        from unittest.mock import patch
        from webui.web import conversations, insights_page as page
        import webui.validation.checks
        import mcp.client.session as sdk

        def test_a(monkeypatch):
            monkeypatch.setattr(conversations, "RECHECK_SECONDS", 0.05)
            monkeypatch.setattr("webui.web.audit_pages.POLL_INTERVAL", 0.1)
            setattr(page, "SETTLE_DELAY", 0)
            mock.patch.object(page, "REFRESH_TIMEOUT", 1)
            patch("webui.insights.sampler.PRUNE_SECONDS", 0)
            page.FRESH_SECONDS = 0.0
            webui.validation.checks.CHECK_SECONDS = 0.2

        def test_b(monkeypatch):
            monkeypatch.setattr(conversations, "render_block", print)  # not timing
            monkeypatch.setenv("STEAMHARNESS_TASK_AFTER_SECONDS", "0.1")  # a setting: fine
            monkeypatch.setattr(page, "read_seconds", 1)  # not a constant
            sdk.DISCOVER_TIMEOUT_SECONDS = 60  # not the product's
            local = type("L", (), {})()
            local.WAIT_SECONDS = 1  # not the product's

        CHILD = \'\'\'
        from webui.knowledge import extract as ex
        ex.MAX_PDF_SECONDS = 2.0
        print(ex.extract("a.pdf", b"", pdf_seconds=2.0))
        \'\'\'
        """
    )
    assert [name for _, name in monkeypatched_timing(source)] == [
        "RECHECK_SECONDS",
        "POLL_INTERVAL",
        "SETTLE_DELAY",
        "REFRESH_TIMEOUT",
        "PRUNE_SECONDS",
        "FRESH_SECONDS",
        "CHECK_SECONDS",
        "MAX_PDF_SECONDS",
    ]
