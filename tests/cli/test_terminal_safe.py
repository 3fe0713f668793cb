"""Stored text never reaches a terminal as controls: a document (or a configuration value, or a
project's description) holding escape sequences — clear the screen, set the window title, write
the clipboard (OSC 52), overwrite the line with fake output, reorder it (bidi overrides) — is
printed by every command with those characters shown as escapes (`webui.cli.common.echo`),
and `--json` stays JSON that reads back to the same values. A scan keeps every command's
output going through that one writer."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.conftest import EXAMPLES, REPO
from tests.knowledge.test_cli import clean_env, write_project

# What a terminal acts on: clear screen, window title (OSC 0, ended by BEL), clipboard
# (OSC 52, ended by ST), a carriage return that overwrites the line, CSI as one C1 byte, DEL,
# a right-to-left override and an isolate.
HOSTILE = (
    "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x1b\\"
    "fake$ prompt\r\x9b31mred\x7f \u202egnp.exe\u2066x\u2069 \x08end"
)
KEY = "\x1b]0;k\x07\x9b\u202e"  # a metadata key (at most 64 characters)
ACTED_ON = {*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F)} | {
    *range(0x2066, 0x206A)
}
CLI = REPO / "webui" / "cli"


def assert_terminal_safe(*outputs: str) -> None:
    for out in outputs:
        found = sorted({f"U+{ord(c):04X}" for c in out if ord(c) in ACTED_ON})
        assert not found, (found, out)


def test_terminal_safe_shows_what_a_terminal_would_act_on_and_keeps_lines_and_tabs() -> None:
    from webui.cli.common import highlighted, json_text, terminal_safe

    shown = terminal_safe(f"a\tb\n{HOSTILE}\x00")
    assert_terminal_safe(shown)
    assert shown.startswith("a\tb\n\\x1b[2J\\x1b[H\\x1b]0;owned\\x07")
    assert "prompt\\x0d\\x9b31mred\\x7f \\u202egnp" in shown
    assert shown.endswith("\\x08end\\x00")
    assert terminal_safe(shown) is shown  # already safe: as it is
    text = json_text({"k": HOSTILE, "line": "a\u2028b\x85c"}, indent=None)
    assert_terminal_safe(text)
    assert "\n" not in text and "\u2028" not in text  # NDJSON: one line to every reader
    assert json.loads(text) == {"k": HOSTILE, "line": "a\u2028b\x85c"}
    marked = highlighted(f"x {HOSTILE} lighthouse  y", [[len(HOSTILE) + 3, len(HOSTILE) + 13]], ("<", ">"))
    assert_terminal_safe(marked)
    assert marked.endswith(" <lighthouse> y")


@pytest.fixture
def hostile_kb(tmp_path: Path) -> tuple[Path, str, str]:
    """A knowledge base holding one document with HOSTILE in its text, title and metadata."""
    project = write_project(tmp_path / "project")
    data = tmp_path / "data"
    doc = tmp_path / "evil.md"
    doc.write_text(f"lighthouse {HOSTILE} keeper\nsecond\tline\n", encoding="utf-8")
    done = kb(
        data,
        "add",
        project,
        "docs",
        str(doc),
        "--title",
        f"T {HOSTILE}",
        "--metadata",
        json.dumps({KEY: HOSTILE}),
    )
    assert done.returncode == 0, done.stderr
    return data, project, done.stdout.split()[1]


def kb(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["knowledge", *args, "--data-dir", str(data)], env=clean_env())


def test_knowledge_show_search_list_print_a_documents_escapes_as_text(
    hostile_kb: tuple[Path, str, str],
) -> None:
    data, project, doc_id = hostile_kb
    for args in (
        ["show", project, doc_id],
        ["search", project, "lighthouse"],
        ["list", project],
        ["collections", project],
        ["export", project],
    ):
        done = kb(data, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert_terminal_safe(done.stdout, done.stderr)
    shown = kb(data, "show", project, doc_id).stdout
    assert "title: T \\x1b[2J\\x1b[H\\x1b]0;owned\\x07" in shown  # seen, as what it is
    assert shown.endswith(
        "lighthouse \\x1b[2J\\x1b[H\\x1b]0;owned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x1b\\fake$ prompt"
        "\\x0d\\x9b31mred\\x7f \\u202egnp.exe\\u2066x\\u2069 \\x08end keeper\nsecond\tline\n"
    )
    assert "[[lighthouse]]" in kb(data, "search", project, "lighthouse").stdout


def test_knowledge_json_stays_json_of_the_stored_values(hostile_kb: tuple[Path, str, str]) -> None:
    data, project, doc_id = hostile_kb
    outputs = {
        "show": kb(data, "show", project, doc_id, "--json").stdout,
        "search": kb(data, "search", project, "lighthouse", "--json").stdout,
        "list": kb(data, "list", project, "--json").stdout,
    }
    assert_terminal_safe(*outputs.values())
    doc = json.loads(outputs["show"])
    assert (doc["title"], doc["metadata"]) == (f"T {HOSTILE}", {KEY: HOSTILE})
    assert doc["text"] == f"lighthouse {HOSTILE} keeper\nsecond\tline\n"
    assert json.loads(outputs["list"])["documents"][0]["title"] == f"T {HOSTILE}"
    assert json.loads(outputs["search"])["hits"][0]["title"] == f"T {HOSTILE}"
    # The export is terminal-safe and still the same records: it imports back as it was.
    export = kb(data, "export", project).stdout
    records = [json.loads(line) for line in export.splitlines()]
    assert records[1]["text"] == doc["text"] and records[1]["metadata"] == {KEY: HOSTILE}


def test_a_configuration_value_and_a_projects_description_print_as_text(tmp_path: Path) -> None:
    from tests.configs.test_cli import write_project as write_configured

    project = str(write_configured(tmp_path / "configured", [{"name": "endpoint", "type": "string"}]))
    data = tmp_path / "data"
    env = clean_env()
    made = run_cli(
        ["configs", "create", project, "evil", f"endpoint={HOSTILE}", "--data-dir", str(data)], env=env
    )
    assert made.returncode == 0, made.stderr
    for extra in ([], ["--json"]):
        done = run_cli(["configs", "show", project, "evil", *extra, "--data-dir", str(data)], env=env)
        assert done.returncode == 0, done.stderr
        assert_terminal_safe(done.stdout, done.stderr)
    shown = run_cli(["configs", "show", project, "evil", "--json", "--data-dir", str(data)], env=env).stdout
    assert json.loads(shown)["values"]["endpoint"] == HOSTILE

    hello = tmp_path / "hello"
    shutil.copytree(EXAMPLES / "hello", hello)
    package = json.loads((hello / "package.json").read_text(encoding="utf-8"))
    package["description"] = HOSTILE
    package["entrypoints"][0]["description"] = HOSTILE
    (hello / "package.json").write_text(json.dumps(package), encoding="utf-8")
    report = run_cli(["structure", str(hello)], env=env)
    assert report.returncode == 0, report.stderr
    assert_terminal_safe(report.stdout, report.stderr)
    assert json.loads(report.stdout)["entrypoints"][0]["description"] == HOSTILE


# ----------------------------------------------------------------- the one writer

# Writers that would print a string as it is; `webui/cli/common.py` holds the one that does not.
_RAW_WRITERS = {("typer", "echo"), ("typer", "secho"), ("click", "echo"), ("click", "secho")}
_STREAMS = {("sys", "stdout"), ("sys", "stderr")}
# Prompts show their text: a literal, or terminal_safe(...) of what is not.
_PROMPTS = {("typer", "confirm"), ("typer", "prompt"), ("getpass", "getpass"), ("click", "confirm")}


def _dotted(node: ast.expr) -> tuple[str, ...]:
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        return (*_dotted(node.value), node.attr)
    return ()


def _raw_output(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        stream = len(name) >= 3 and name[:2] in _STREAMS and name[-1] in {"write", "writelines"}
        if name in _RAW_WRITERS or name in {("print",)} or name[-1:] == ("TerminalText",) or stream:
            found.append(f"line {node.lineno}: {'.'.join(name)}(…)")
        elif name in _PROMPTS and node.args:
            shown = node.args[0]
            safe = isinstance(shown, ast.Constant) or (
                isinstance(shown, ast.Call) and _dotted(shown.func)[-1:] == ("terminal_safe",)
            )
            if not safe:
                found.append(f"line {node.lineno}: {'.'.join(name)}(…) of text that is not terminal_safe")
    return found


def test_every_command_writes_through_the_one_terminal_safe_writer() -> None:
    """No command module prints, echoes, writes sys.stdout/sys.stderr or marks text safe itself:
    `webui.cli.common.echo` (and `json_text`, `highlighted`) is the only way out."""
    modules = sorted(p for p in CLI.glob("*.py") if p.name != "common.py")
    assert len(modules) > 10
    offenders = {
        p.name: hits for p in modules if (hits := _raw_output(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_the_scan_finds_each_way_around_the_writer() -> None:
    code = """
typer.echo(x)
print(x)
sys.stdout.write(x)
sys.stderr.buffer.writelines(x)
sys.stdout.isatty()
common.TerminalText(x)
typer.confirm(f"Remove {x}?")
typer.confirm(terminal_safe(f"Remove {x}?"))
getpass.getpass("key: ")
"""
    assert [hit.split(":")[1].strip() for hit in _raw_output(ast.parse(code))] == [
        "typer.echo(…)",
        "print(…)",
        "sys.stdout.write(…)",
        "sys.stderr.buffer.writelines(…)",
        "common.TerminalText(…)",
        "typer.confirm(…) of text that is not terminal_safe",
    ]
