"""`ctx.together()` on the worker side: the round is checked as it is built (keys, size),
sent as one request when its block ends (nothing when the block raised), and each
question's `.result()` is what its single call would return or raise."""

from __future__ import annotations

from typing import Any, cast

import pytest

from webui.runs.context import Channel
from webui.runs.context_questions import MAX_ROUND_QUESTIONS, ClientRequestRefused, QuestionRound


class FakeChannel:
    def __init__(self, results: list[dict[str, Any]]) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.results = results

    def rpc(self, op: str, **args: Any) -> Any:
        self.sent.append((op, args))
        return {"results": self.results}


def _round(results: list[dict[str, Any]]) -> tuple[QuestionRound, FakeChannel]:
    chan = FakeChannel(results)
    return QuestionRound(cast(Channel, chan)), chan


def test_the_round_is_one_request_and_each_result_is_its_single_calls() -> None:
    sampled = {"role": "assistant", "content": {"type": "text", "text": "hi"}}
    round_, chan = _round(
        [
            {"action": "accept", "content": {"v": 1}},
            {"action": "decline", "content": None},
            {"action": "accept", "content": sampled},
            {"action": "decline", "content": None, "reason": "the MCP client did not declare roots"},
        ]
    )
    with round_ as r:
        asked = r.ask("t", [{"name": "v", "type": "integer"}], key="a")
        approved = r.approve("deploy", key="b")
        sample = r.sample("hello", max_tokens=5)
        roots = r.roots(key="c")
        with pytest.raises(RuntimeError, match="once the round's block has ended"):
            asked.result()
    [(op, args)] = chan.sent
    assert op == "together"
    assert [(q["op"], q["args"].get("key")) for q in args["requests"]] == [
        ("ask", "a"),
        ("approve", "b"),
        ("sample", None),
        ("roots", "c"),
    ]
    assert args["requests"][2]["args"]["max_tokens"] == 5
    assert asked.result() == {"v": 1}
    assert approved.result() is False
    assert sample.result() == sampled
    with pytest.raises(ClientRequestRefused, match="did not declare roots"):
        roots.result()
    with pytest.raises(RuntimeError, match="already asked"):
        r.roots()


def test_a_block_that_raises_asks_nothing() -> None:
    round_, chan = _round([])
    with pytest.raises(KeyError), round_ as r:
        r.roots()
        raise KeyError("x")
    assert chan.sent == []


def test_an_empty_round_asks_nothing() -> None:
    round_, chan = _round([])
    with round_:
        pass
    assert chan.sent == []


def test_a_key_twice_a_bad_key_or_too_many_questions_are_refused_at_once() -> None:
    round_, _ = _round([])
    round_.roots(key="k")
    with pytest.raises(ValueError, match="given twice"):
        round_.ask("t", [], key="k")
    with pytest.raises(ValueError, match="not a valid input key"):
        round_.sample("x", key="no spaces")
    for _ in range(MAX_ROUND_QUESTIONS - 1):
        round_.roots()
    with pytest.raises(ValueError, match=f"at most {MAX_ROUND_QUESTIONS}"):
        round_.roots()
