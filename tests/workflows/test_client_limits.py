"""The names MCP clients build from a server's name and a tool's name, and their limits
(`webui.workflows.client_limits`): the short server name the client set-ups use is always
short and plain, and each known client's limit is checked as its source states it."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from webui.workflows.client_limits import (
    CLIENT_LIMITS,
    MAX_SHORT_NAME,
    name_problems,
    short_server_name,
)

PROJECT = "c0ffee00-1111-4222-8333-444455556666"
SHORT_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
TOOL = "collect_document"  # the issue's example: 68 characters in Claude Code as workflow-<uuid>


def test_the_short_name_is_the_projects_name_in_plain_lower_case() -> None:
    assert short_server_name("Invoices", PROJECT) == "invoices"
    assert short_server_name("Month-end close", PROJECT) == "month-end-close"
    assert short_server_name("  Café  Déjà-vu!! ", PROJECT) == "cafe-deja-vu"
    assert short_server_name("ﬁles_２０２６", PROJECT) == "files-2026"  # NFKD: ligature, full width
    assert short_server_name("İstanbul", PROJECT) == "istanbul"


def test_a_long_name_is_cut_to_the_bound_without_a_trailing_dash() -> None:
    assert short_server_name("a" * 10_000, PROJECT) == "a" * MAX_SHORT_NAME
    assert short_server_name("abcdefghijklmnopqrs tuvwxyz", PROJECT) == "abcdefghijklmnopqrs"


def test_a_name_with_nothing_latin_left_falls_back_to_a_short_form_of_the_id() -> None:
    for name in ("", "   ", "日本語のプロジェクト", "!!!---", "\u202e\u2066", "مشروع"):
        assert short_server_name(name, PROJECT) == "workflow-c0ffee00", name
    assert short_server_name("", "") == "workflow"


@given(st.text(max_size=300), st.uuids().map(str))
def test_every_short_name_is_plain_bounded_and_fits_claude_code_with_the_example_tool(
    name: str, project_id: str
) -> None:
    short = short_server_name(name, project_id)
    assert SHORT_RE.fullmatch(short), short
    assert len(short) <= MAX_SHORT_NAME
    assert len("mcp__" + short + "__" + TOOL) <= 64
    assert len(short) + len(TOOL) < 60
    assert name_problems(short, [TOOL]) == []


def test_the_issues_example_does_not_fit_claude_code_as_workflow_uuid_and_fits_as_the_short_name() -> None:
    long_name = f"workflow-{PROJECT}"
    [claude, cursor] = name_problems(long_name, [TOOL])
    assert (claude.client, claude.length, claude.name) == ("Claude Code", 68, f"mcp__{long_name}__{TOOL}")
    assert "at most 64" in claude.text() and "68 characters" in claude.text()
    assert (cursor.client, cursor.length) == ("Cursor", 61)
    # exactly 64 is still taken (the issue: close_period makes exactly 64)
    assert len(f"mcp__{long_name}__close_period") == 64
    assert name_problems(long_name, ["close_period"]) == []
    assert name_problems(short_server_name("Month-end close", PROJECT), [TOOL, "close_period"]) == []


def test_claude_code_takes_at_most_64_characters_of_mcp_server_tool() -> None:
    short = "ab"  # mcp__ab__ is 9 characters
    assert name_problems(short, ["t" * 55]) == []
    [problem] = [p for p in name_problems(short, ["t" * 56]) if p.client == "Claude Code"]
    assert problem.length == 65 and problem.tool == "t" * 56


def test_cursor_takes_fewer_than_60_characters_of_server_and_tool_names_together() -> None:
    # its source: a 1-character server and a 59-character tool are "(60) exceeds 60"
    def cursor(short: str, tool: str) -> list[int]:
        return [p.length for p in name_problems(short, [tool]) if p.client == "Cursor"]

    assert cursor("g", "T" * 59) == [60]
    assert cursor("g", "T" * 58) == []
    assert cursor("a" * 20, "T" * 40) == [60] and cursor("a" * 20, "T" * 39) == []


def test_a_dotted_tool_name_is_not_a_function_name_for_the_models_behind_vs_code() -> None:
    [problem] = name_problems("rich", ["x.y"])
    assert problem.client == "VS Code (GitHub Copilot)" and problem.name == "x.y" and problem.length == 3
    assert "A-Z a-z 0-9 _ -" in problem.text()
    assert name_problems("rich", ["x_y-Z9"]) == []


def test_problems_come_in_the_tools_order_then_the_clients_order() -> None:
    found = name_problems("s", ["ok", "a" * 60, "b.c"])
    assert [(p.tool, p.client) for p in found] == [
        ("a" * 60, "Claude Code"),
        ("a" * 60, "Cursor"),
        ("b.c", "VS Code (GitHub Copilot)"),
    ]


def test_every_limit_names_its_public_source() -> None:
    for limit in CLIENT_LIMITS:
        assert limit.source.startswith("https://"), limit.client
        assert limit.rule and limit.most > 0
