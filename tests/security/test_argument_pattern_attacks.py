"""Issue 36, attack pass b: holes found in the first fixes of argument validation
(webui.validation), each attacked as it would be used: the deadline inside patternProperties,
one pattern's search too costly for its text, one account's slow checks holding every other
account's, and ECMA-262 patterns RE2 read otherwise (`.`, `\\S` in a class, RE2's own syntax)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import anyio
import pytest

from webui import validation
from webui.validation import keywords, limits

pytestmark = pytest.mark.anyio


def _pattern_schema(patterns: int) -> dict[str, Any]:
    """An object schema with `patterns` patternProperties no key matches (within every
    schema bound: ~30 KB for 1,000)."""
    return {
        "type": "object",
        "patternProperties": {f"^zz{i}$": {"type": "string"} for i in range(patterns)},
    }


def test_the_deadline_stops_a_check_inside_pattern_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    searched = keywords.search
    after_deadline = 0

    def search(pattern: str, text: str) -> bool:
        nonlocal after_deadline
        deadline = limits.state.deadline
        if deadline is not None and deadline <= 0:
            after_deadline += 1
        # From the first search on, the check's deadline has passed (as if it took 5 s).
        limits.state.deadline = 0.0
        return searched(pattern, text)

    monkeypatch.setattr(keywords, "search", search)
    with pytest.raises(validation.CheckRefused):
        validation.problems(_pattern_schema(200), {f"k{i}": 1 for i in range(300)})
    # 60,000 searches are asked; a deadline that holds stops them soon after it passes.
    assert after_deadline < 1000, f"{after_deadline} searches after the deadline had passed"


async def test_two_slow_checks_do_not_hold_every_other_check(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    searched = keywords.search
    started = 0

    class Stopped(Exception):
        pass

    def search(pattern: str, text: str) -> bool:
        nonlocal started
        if stop.is_set():
            raise Stopped  # the test is over: end the hostile checks' threads
        started += 1
        return searched(pattern, text)

    monkeypatch.setattr(keywords, "search", search)
    hostile_schema = _pattern_schema(1000)
    hostile_value = {f"k{i}": 1 for i in range(60_000)}

    def hostile() -> None:
        with contextlib.suppress(Stopped, validation.CheckRefused):
            validation.problems(hostile_schema, hostile_value)

    benign_done = False
    await anyio.to_thread.run_sync(validation.validator, hostile_schema)  # screened once, not by each
    async with anyio.create_task_group() as tg:
        # Two accounts, two checks each (more than the old pool of 2 threads, all of them).
        for account in ("mallory", "mallory", "eve", "eve"):
            tg.start_soon(validation.run_check, account, hostile)
        try:
            with anyio.fail_after(60):  # a hang guard: until the hostile checks search
                while started < 2:
                    await anyio.sleep(0.05)
            with anyio.move_on_after(20):  # a hang guard: the hostile checks would run for minutes
                # Another account's one-field check: checked within a deadline, not behind them.
                await validation.run_check("alice", validation.problems, {"type": "string"}, "hello")
                benign_done = True
        finally:
            stop.set()
    assert benign_done, "another account's check still waited behind two hostile checks after 20 s"


@pytest.mark.parametrize("value", ["name\rSet-Cookie: admin=1", "name\u2028injected", "name\u2029x"])
def test_dot_refuses_line_terminators_as_ecma_does(value: str) -> None:
    schema = {"type": "string", "pattern": "^.{1,64}$"}
    assert validation.problems(schema, value), f"{value!r} passed ^.{{1,64}}$"


@pytest.mark.parametrize("value", ["a\u00a0b", "a\u3000b", "a\u2028b", "a\ufeffb"])
def test_non_space_in_a_class_is_ecmas(value: str) -> None:
    schema = {"type": "string", "pattern": "^[\\S]+$"}
    assert validation.problems(schema, value), f"{value!r} passed ^[\\S]+$"


async def test_an_account_holds_at_most_its_share_of_the_checks_threads() -> None:
    """One account's checks run one at a time (`CHECK_THREADS_PER_ACCOUNT`), its others wait."""
    release = threading.Event()
    running: list[str] = []

    def held(name: str) -> None:
        running.append(name)
        release.wait(20)  # a hang guard

    async def mallorys_check(name: str) -> None:
        await validation.run_check("mallory", held, name)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(mallorys_check, "first")
            tg.start_soon(mallorys_check, "second")
            with anyio.fail_after(20):
                while not running:
                    await anyio.sleep(0.01)
                await validation.run_check("alice", running.append, "alice")
            assert running == ["first", "alice"]  # mallory's second waits for her first
            release.set()
    finally:
        release.set()
    assert sorted(running) == ["alice", "first", "second"]


def test_a_search_too_costly_for_its_text_is_refused_not_run() -> None:
    """`[ab]*a[ab]{999}` defeats RE2's DFA: ~15-30 ns per byte and instruction (16.7 s on
    1 MB before); its program x the text's bytes is over PATTERN_WORK, so not searched."""
    schema = {"type": "string", "pattern": "[ab]*a[ab]{999}"}
    with pytest.raises(validation.CheckRefused, match="too long to check against pattern"):
        validation.problems(schema, "ab" * 50_000)
    assert validation.problems(schema, "b" * 2000)  # a short text is searched as usual
    assert not validation.problems(schema, "a" * 1000)
    # Beside a maxLength the text exceeds, the pattern is not searched: maxLength refuses it.
    bounded = {**schema, "maxLength": 64}
    assert [e.validator for e in validation.problems(bounded, "ab" * 50_000)] == ["maxLength"]


def test_a_pattern_of_too_many_instructions_is_refused_at_load() -> None:
    problem = validation.pattern_problem("^.{0,1000}$")
    assert problem is not None and "RE2 instructions" in problem
    assert validation.pattern_problem("^.{1,256}$") is None
    with pytest.raises(validation.SchemaUnusable, match="too costly to run"):
        validation.usable({"type": "string", "pattern": "^.{0,1000}$"})


@pytest.mark.parametrize("value", ["name\rSet-Cookie: admin=1", "name\u2028injected", "name\u2029x", "a\nb"])
def test_dot_refuses_every_line_terminator(value: str) -> None:
    assert validation.problems({"type": "string", "pattern": "^a.b$|^name.+$"}, value)
    assert not validation.problems({"type": "string", "pattern": "^.+$"}, "name\u00a0é😀[x]")


def test_space_classes_inside_a_class_are_ecmas() -> None:
    schema = {"type": "string", "pattern": "^[\\S-]+$"}
    assert not validation.problems(schema, "a-é😀")
    assert validation.problems(schema, "a\u3000b")
    negated = {"type": "string", "pattern": "^[^\\S]+$"}  # white space only
    assert not validation.problems(negated, " \u3000\u2028\ufeff\t")
    assert validation.problems(negated, " x")
    mixed = {"type": "string", "pattern": "^[\\sa]+$"}
    assert not validation.problems(mixed, "a\u00a0a")


@pytest.mark.parametrize(
    ("pattern", "named"),
    [("(?i)abc", "(?i)"), ("(?s).", "(?s)"), ("\\Aabc", "\\A"), ("abc\\z", "\\z"),
     ("[[:alpha:]]", "POSIX class"), ("\\pL", "\\p"), ("(?P<n>a)", "(?P<")],
)  # fmt: skip
def test_re2s_own_syntax_is_refused_with_what_it_is(pattern: str, named: str) -> None:
    problem = validation.pattern_problem(pattern)
    assert problem is not None and named in problem, problem
    with pytest.raises(validation.SchemaUnusable, match="refused"):
        validation.usable({"type": "string", "pattern": pattern})
    assert validation.pattern_problem("(?:a)(?<n>b)\\p{L}[a:]") is None
