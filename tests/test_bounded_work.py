"""No regular expression built from data, JSON Schema validation, file or document parser,
JSON read from outside, network call or bounded child waited on in the thread is reachable
from the event loop or from inside a database thread except through a bounded wrapper
(`tests/bounded_work.py` reads the source; docs/architecture.md, "work hostile input can
make long")."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.bounded_work import findings, read_tree

ROOT = Path(__file__).resolve().parent.parent

# The bounded wrappers: where such work may run, and why it is bounded there. A new entry
# needs the same: a bound on the input's size and the work's time, or a process of its own.
ALLOWED: dict[str, str] = {
    "webui.validation.schemas:valid": (
        "a schema checked against the metaschema only once _sized bounded it (64 KiB, 4,000 values, "
        "32 levels); its patterns are compiled by RE2, not by the metaschema's format"
    ),
    "webui.configs.redaction:Redaction.__init__": (
        "an alternation of re.escape'd secrets (literals, no repetition: linear to match), "
        "as many as the configuration's bounded fields"
    ),
    "webui.edge.access_log:Redactor.__init__": "the server's own secrets from its settings, once at start",
    "webui.auth.saved:saved_auth_env": "the operator's own saved login, read once when stdio starts",
    "webui.knowledge.reader:FileReader.read_blocking": (
        "the CLI's reader of a file's bytes (a bounded child it waits on): it refuses in a database"
        " thread, and the server's async paths pass read text (`read`, awaited), never bytes, to `_text`"
    ),
    "webui.workflows.package_json:read_package_json": (
        "a project's package.json on the server's disk (registered by an operator), read by the "
        "strict reader within its length and value counts"
    ),
}


def test_hostile_cost_work_runs_only_inside_the_bounded_wrappers() -> None:
    found = findings(read_tree(ROOT), ALLOWED)
    assert not found, "unbounded work reachable from the event loop or a database thread:\n" + "\n".join(
        map(str, found)
    )


def test_every_allowed_wrapper_is_a_function_of_the_tree() -> None:
    tree = read_tree(ROOT)
    assert sorted(set(ALLOWED) - set(tree.functions)) == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    (tmp_path / "pkg" / "__init__.py").touch()
    return tmp_path


def test_the_check_follows_calls_handed_over_functions_and_methods(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "checks.py": """
                import re
                import jsonschema
                import httpx2
                from pypdf import PdfReader

                def matches(pattern, text):
                    return re.search(pattern, text)

                def constant(text):
                    return re.search(r"[a-z]+", text)  # our own pattern: not data

                def bounded(schema, value):
                    return list(jsonschema.Draft202012Validator(schema).iter_errors(value))

                class Fetcher:
                    def fetch_one(self, url):
                        return self._get(url)

                    def _get(self, url):
                        return httpx2.get(url)

                def pages(data):
                    return PdfReader(data).pages
            """,
            "routes.py": """
                from pkg.checks import matches, constant, bounded, Fetcher, pages
                from pkg import checks

                async def route(pattern, text):
                    constant(text)
                    return matches(pattern, text)

                async def offloaded(schema, value):
                    return await run_db(lambda: checks.bounded(schema, value))

                async def wrapped(schema, value):
                    return await run_bounded(bounded, schema, value)

                async def fetches(fetcher):
                    return fetcher.fetch_one("http://127.0.0.1/")

                async def reads(data):
                    return await run_db(pages, data)
            """,
        },
    )
    tree = read_tree(root, "pkg")
    found = {(f.where, f.root_kind, f.chain[0]) for f in findings(tree, [])}
    assert found == {
        ("pkg/checks.py:8", "event loop", "pkg.routes:route"),
        ("pkg/checks.py:14", "database thread", "pkg.routes:offloaded.<lambda@10>"),
        ("pkg/checks.py:21", "event loop", "pkg.routes:fetches"),
        ("pkg/checks.py:24", "database thread", "pkg.checks:pages"),
    }
    # An allowed wrapper stops the walk there.
    assert [f.where for f in findings(tree, ["pkg.checks:matches", "pkg.checks:Fetcher._get"])] == [
        "pkg/checks.py:14",
        "pkg/checks.py:24",
    ]


def test_a_bounded_child_waited_on_in_a_database_thread_or_on_the_loop_is_found(tmp_path: Path) -> None:
    """A child waited on in the calling thread holds that thread for the child's whole bound
    (a draft's handler import: 30 s): async code awaits `run_child` instead (issue 38)."""
    root = _package(
        tmp_path,
        {
            "checks.py": """
                from webui.bounded_child import run_child, run_child_blocking

                def check(payload):
                    return run_child_blocking("m:f", payload, None)

                async def check_async(payload):
                    return await run_child("m:f", payload, None)
            """,
            "routes.py": """
                from pkg.checks import check, check_async

                async def publish(payload):
                    return await run_db(check, payload)

                async def preview(payload):
                    return check(payload)

                async def fine(payload):
                    return await check_async(payload)
            """,
        },
    )
    found = {(f.where, f.root_kind, f.chain[0], f.sink) for f in findings(read_tree(root, "pkg"), [])}
    sink = "child process waited on (webui.bounded_child.run_child_blocking)"
    assert found == {
        ("pkg/checks.py:5", "database thread", "pkg.checks:check", sink),
        ("pkg/checks.py:5", "event loop", "pkg.routes:preview", sink),
    }
