"""The questions a workflow handler asks through its `ctx` (webui.runs.context), in its worker
process: each one's request and how its answer becomes what the call returns (`ctx.ask`,
`ctx.approve`, `ctx.sample`, `ctx.roots`), and a round of them asked at once
(`ctx.together()`, `QuestionRound`).

Standard library only, like the rest of the worker side (webui.runs.child).
"""

from __future__ import annotations

import re
from typing import Any, Protocol


class _Rpc(Protocol):
    """The run's channel (webui.runs.context `Channel`), as a round uses it."""

    def rpc(self, op: str, **args: Any) -> Any: ...


# What a 2026-07-28 input round may call a question (`ctx.ask(key=...)`).
INPUT_KEY_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def bad_input_key(key: Any, op: str = "ask") -> str:
    """Why `key` is no input key (a long one shown by its start)."""
    shown = repr(key[:80] + "…" if isinstance(key, str) and len(key) > 80 else key)[:100]
    return f"ctx.{op}() key: {shown} is not a valid input key (1-64 of A-Z a-z 0-9 _ . -)"


class ClientRequestRefused(RuntimeError):
    """`ctx.sample` / `ctx.roots`: the MCP client did not give what was asked (it declined,
    or did not declare the capability: then `capability` names it, and a handler that lets
    this escape ends its call as a tool requiring that capability would)."""

    def __init__(self, message: str, capability: str | None = None) -> None:
        super().__init__(message)
        self.capability = capability


def _check_key(key: Any, op: str) -> None:
    if key is not None and (not isinstance(key, str) or not INPUT_KEY_RE.fullmatch(key)):
        raise ValueError(bad_input_key(key, op))


def ask_args(title: str, fields: Any, message: str | None, key: str | None) -> dict[str, Any]:
    _check_key(key, "ask")
    return {"title": title, "fields": fields, "message": message, "key": key}


def ask_result(answer: dict[str, Any]) -> dict[str, Any] | None:
    return answer["content"] if answer["action"] == "accept" else None


def approve_args(action: str, message: str | None, details: Any, key: str | None) -> dict[str, Any]:
    _check_key(key, "approve")
    return {"action": action, "message": message, "details": details, "key": key}


def approve_result(answer: dict[str, Any]) -> bool:
    return answer["action"] == "accept"


def sample_args(
    prompt: str | None,
    messages: list[dict[str, Any]] | None,
    max_tokens: int,
    system: str | None,
    temperature: float | None,
    key: str | None,
) -> dict[str, Any]:
    _check_key(key, "sample")
    return {
        "prompt": prompt,
        "messages": messages,
        "max_tokens": max_tokens,
        "system": system,
        "temperature": temperature,
        "key": key,
    }


def sample_result(answer: dict[str, Any]) -> dict[str, Any]:
    if answer["action"] != "accept":
        raise ClientRequestRefused(
            answer.get("reason") or "the MCP client declined the sampling request", answer.get("undeclared")
        )
    return answer["content"]


def roots_args(key: str | None) -> dict[str, Any]:
    _check_key(key, "roots")
    return {"key": key}


def roots_result(answer: dict[str, Any]) -> list[dict[str, Any]]:
    if answer["action"] != "accept":
        raise ClientRequestRefused(
            answer.get("reason") or "the MCP client declined the roots request", answer.get("undeclared")
        )
    return list(answer["content"]["roots"])


# How many questions one `ctx.together()` round may ask (the server checks it again).
MAX_ROUND_QUESTIONS = 16


class Asked:
    """One question of a `ctx.together()` round: `.result()` once the round's block ended."""

    _UNSET: Any = object()

    def __init__(self, convert: Any) -> None:
        self._convert = convert
        self._answer: Any = self._UNSET

    def result(self) -> Any:
        """What the question's single call returns (or raises); a RuntimeError before the
        round's block has ended."""
        if self._answer is self._UNSET:
            raise RuntimeError(
                "ctx.together(): a question's result is there once the round's block has ended"
            )
        return self._convert(self._answer)


class QuestionRound:
    """`ctx.together()`: questions gathered in a with-block, asked when it ends."""

    def __init__(self, chan: _Rpc) -> None:
        self._chan = chan
        self._requests: list[tuple[str, dict[str, Any], Asked]] = []
        self._keys: set[str] = set()
        self._sent = False

    def _add(self, op: str, args: dict[str, Any], convert: Any) -> Asked:
        if self._sent:
            raise RuntimeError("ctx.together(): this round was already asked")
        if len(self._requests) >= MAX_ROUND_QUESTIONS:
            raise ValueError(f"ctx.together(): a round asks at most {MAX_ROUND_QUESTIONS} questions")
        key = args.get("key")
        if key is not None:
            if key in self._keys:
                raise ValueError(f"ctx.together(): the key {key!r} is given twice in one round")
            self._keys.add(key)
        asked = Asked(convert)
        self._requests.append((op, args, asked))
        return asked

    def ask(self, title: str, fields: Any, message: str | None = None, *, key: str | None = None) -> Asked:
        return self._add("ask", ask_args(title, fields, message, key), ask_result)

    def approve(
        self, action: str, message: str | None = None, details: Any = None, *, key: str | None = None
    ) -> Asked:
        return self._add("approve", approve_args(action, message, details, key), approve_result)

    def sample(
        self,
        prompt: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        max_tokens: int = 512,
        system: str | None = None,
        temperature: float | None = None,
        key: str | None = None,
    ) -> Asked:
        args = sample_args(prompt, messages, max_tokens, system, temperature, key)
        return self._add("sample", args, sample_result)

    def roots(self, *, key: str | None = None) -> Asked:
        return self._add("roots", roots_args(key), roots_result)

    def __enter__(self) -> QuestionRound:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None or self._sent:
            return
        self._sent = True
        if not self._requests:
            return
        requests = [{"op": op, "args": args} for op, args, _ in self._requests]
        answers = self._chan.rpc("together", requests=requests)["results"]
        for (_, _, asked), answer in zip(self._requests, answers, strict=True):
            asked._answer = answer
