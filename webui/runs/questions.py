"""A run's questions to a person (`ctx.ask`, `ctx.approve`): recorded, waited for with the
run's slot given up and its time limit paused, answered (on any replica) or expired.

A run waiting for a person keeps its worker process, so waiting runs have caps of their own
(`max_waiting_runs` in all, its last quarter only for accounts with none waiting;
`max_waiting_per_account` with an open question), and a question expires after
`question_timeout_seconds` (the run fails, `question_expired`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from webui.blocking import run_db
from webui.errors import ProjectError
from webui.interactions.client_requests import (
    ANSWERED_ENTRY,
    ASKED_ENTRY,
    CLIENT_KINDS,
    UNDECLARED_CHANNEL,
    answered_entry,
    asked_entry,
    is_client_request,
    sampling_params,
)
from webui.interactions.client_requests import summary as client_request_summary
from webui.interactions.service import Answer
from webui.observability.metrics import METRICS
from webui.observability.tracing import TRACER
from webui.runs.context_questions import INPUT_KEY_RE, bad_input_key
from webui.runs.control import QuestionControl
from webui.runs.live import LiveRun, OpenQuestion, QuestionRound
from webui.runs.messages import reply
from webui.runs.types import SHARED_POLL_SECONDS, RunStatus, RunUpdate
from webui.store import runs as run_store
from webui.store.models import Interaction, as_utc, utcnow
from webui.workflows.json_schema import check_ask_schema
from webui.workflows.params import parse_params
from webui.workflows.schema import field_summary, form_blockers, question_schema, schema_field_summary

log = logging.getLogger(__name__)


def _duration(seconds: float) -> str:
    """24 h, 90 min, 45 s: how long a limit is, for a person."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def _input_key(key: Any, op: str = "ask") -> str | None:
    """`ctx.ask(key=...)`: the name a 2026-07-28 input round gives the question (checked
    again here: a handler may send the request without its Context)."""
    if key is None:
        return None
    if not isinstance(key, str) or not INPUT_KEY_RE.fullmatch(key):
        raise ProjectError(bad_input_key(key, op))
    return key


def _client_request(op: str, args: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a `sample` or `roots` request (only the MCP client answers it)."""
    kind = "sampling" if op == "sample" else "roots"
    request = sampling_params(args) if kind == "sampling" else {}
    return {
        "kind": kind,
        "input_key": _input_key(args.get("key"), op),
        "title": "Sampling request" if kind == "sampling" else "Roots request",
        "message": client_request_summary(kind, request),
        "requested_schema": {"type": "object", "properties": {}},
        "fields": [],
        "blockers": [],
        "client_request": request,
    }


QUESTION_OPS = ("ask", "approve", "sample", "roots")
# How many questions one `ctx.together()` round may ask, and how many one run may have
# waiting at once (its handler's threads, its rounds): each is a row, a timer and a form.
MAX_ROUND_QUESTIONS = 16
MAX_PENDING_PER_RUN = 16
# A question's title and message as a person reads them (characters), and the whole stored
# question as JSON: it is sent again on every round and every tasks/get.
MAX_TITLE_CHARS = 1024
MAX_MESSAGE_CHARS = 64 * 1024
MAX_QUESTION_CHARS = 1024 * 1024


def _bounded(question: dict[str, Any], op: str) -> dict[str, Any]:
    """`question`, or ProjectError if its title, message or whole is over its limit."""
    for field, limit in (("title", MAX_TITLE_CHARS), ("message", MAX_MESSAGE_CHARS)):
        text = question.get(field) or ""
        if len(text) > limit:
            raise ProjectError(
                f"ctx.{op}(): the question's {field} is {len(text):,} characters,"
                f" over the {limit:,} it may be"
            )
    size = len(json.dumps(question, ensure_ascii=False, default=str))
    if size > MAX_QUESTION_CHARS:
        raise ProjectError(
            f"ctx.{op}(): the question is {size:,} characters as JSON,"
            f" over the {MAX_QUESTION_CHARS:,} it may be"
        )
    return question


def _round(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored forms of a `together` request's questions, in order (checked again here:
    a handler may send the request without its Context)."""
    requests = args.get("requests")
    if not isinstance(requests, list) or not requests:
        raise ProjectError("ctx.together(): a round asks at least one question")
    if len(requests) > MAX_ROUND_QUESTIONS:
        raise ProjectError(
            f"ctx.together(): a round asks at most {MAX_ROUND_QUESTIONS} questions, not {len(requests)}"
        )
    questions: list[dict[str, Any]] = []
    keys: set[str] = set()
    for request in requests:
        op = request.get("op") if isinstance(request, dict) else None
        sub = request.get("args") if isinstance(request, dict) else None
        if op not in QUESTION_OPS or not isinstance(sub, dict):
            raise ProjectError(f"ctx.together(): a round's requests are {', '.join(QUESTION_OPS)}")
        question = _bounded(_question(str(op), sub), str(op))
        key = question.get("input_key")
        if key is not None:
            if key in keys:
                raise ProjectError(f"ctx.together(): the key {key!r} is given twice in one round")
            keys.add(key)
        questions.append(question)
    return questions


def _question(op: str, args: dict[str, Any]) -> dict[str, Any]:
    """The stored form of an `ask` or `approve` request."""
    if op in ("sample", "roots"):
        return _client_request(op, args)
    if op == "ask":
        message = args.get("message")
        fields = args.get("fields")
        if isinstance(fields, dict):
            # A JSON Schema (the MCP elicitation subset): stored and elicited as written.
            schema = check_ask_schema(fields, "ctx.ask() fields")
            summary, blockers = schema_field_summary(schema), []
        else:
            params = parse_params(fields or [], where="ctx.ask() fields")
            schema, summary, blockers = question_schema(params), field_summary(params), form_blockers(params)
        return {
            "kind": "form",
            "input_key": _input_key(args.get("key")),
            "title": str(args.get("title") or "Input needed"),
            "message": str(message) if message is not None else None,
            "requested_schema": schema,
            "fields": summary,
            "blockers": blockers,
        }
    action = str(args.get("action") or "this action")
    parts = [f"The workflow asks for approval to: {action}."]
    if args.get("message"):
        parts.append(str(args["message"]))
    if args.get("details") is not None:
        parts.append(f"Details: {json.dumps(args['details'], ensure_ascii=False, default=str)}")
    return {
        "kind": "approval",
        "input_key": _input_key(args.get("key"), "approve"),
        "title": f"Approve: {action}",
        "message": "\n".join(parts),
        "requested_schema": {"type": "object", "properties": {}},
        "fields": [],
        "blockers": [],
    }


class RunQuestions:
    def __init__(self, runs: QuestionControl) -> None:
        self.runs = runs

    def waiting_refusal(self, live: LiveRun) -> str | None:
        """Why this run may not wait for a person now (a waiting run keeps its worker
        process): None when it may."""
        runs = self.runs
        account = live.request.account_id
        caps = runs.caps
        if (
            not live.asks.pending
            and runs.admission.waiting(account, asking=True) >= caps.max_waiting_per_account
        ):
            return (
                f"This account already has {caps.max_waiting_per_account} runs waiting for an answer"
                " (STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT); answer or cancel one of them, then"
                " call again."
            )
        if live.place.held and (full := runs.admission.waiting_full(account, caps.max_waiting_runs)):
            return f"{full[0].upper()}{full[1:]}; this run stopped instead of waiting."
        return None

    async def open(self, live: LiveRun, rid: int, op: str, args: dict[str, Any]) -> None:
        """`ask` / `approve` (a person), `sample` / `roots` (the MCP client), or `together`
        (a round of those): record the questions; the run waits for their answers."""
        runs = self.runs
        refusal = self.waiting_refusal(live)
        if refusal is not None:
            error = {"code": "too_many_waiting", "message": refusal}
            runs.spawn(runs.terminate(live, RunStatus.FAILED, error), name=f"refuse-{live.run_id}")
            return
        together = op == "together"
        asks = live.asks
        if rid in asks.rounds or rid in asks.pending.values():
            raise ProjectError(f"ctx.{op}(): request {rid} is already waiting for an answer")
        questions = _round(args) if together else [_bounded(_question(op, args), op)]
        waiting = len(asks.pending) + asks.asking
        if waiting + len(questions) > MAX_PENDING_PER_RUN:
            raise ProjectError(
                f"ctx.{op}(): this run already has {waiting} questions waiting; a run may have at most"
                f" {MAX_PENDING_PER_RUN} waiting at once"
            )
        expires_at = utcnow() + timedelta(seconds=runs.caps.question_timeout_seconds)
        req = live.request

        def record() -> list[Interaction]:
            # The run reads `waiting_for_input` before its questions exist, never the other
            # way round: a reader that finds a question finds the run waiting on it.
            run_store.update_run(
                runs.engine,
                run_id=live.run_id,
                status=RunStatus.WAITING_FOR_INPUT.value,
                event_text="waiting_for_input",
                source=req.source,
            )
            return runs.interactions.create_round(
                run_id=live.run_id,
                questions=questions,
                project_id=req.project.id,
                actor=req.actor,
                expires_at=expires_at,
            )

        runs.clock.stop(live)  # a person thinking is not the handler running
        asks.asking += len(questions)  # a resumption meanwhile sees that the run waits again
        try:
            rows = await runs.write(live, record)
        except BaseException:
            asks.asking -= len(questions)
            if live.place.held:
                runs.clock.start(live)
            raise
        asks.asking -= len(questions)
        runs.release_slot(live)
        asked_at = time.monotonic()
        for row in rows:
            self._schedule_expiry(live, row.id, expires_at)
            asks.pending[row.id] = rid
            METRICS.questions_asked.labels(row.kind).inc()
            span = TRACER.start_span(
                "steamharness.question",
                attributes={"steamharness.question.id": row.id, "steamharness.question.kind": row.kind},
            )
            asks.open[row.id] = OpenQuestion(asked_at, span)
        if together:
            asks.rounds[rid] = QuestionRound(rows)
        asks.asked = True
        runs.enter(live, RunStatus.WAITING_FOR_INPUT)
        # The first question is shown; the others follow it as it is answered (an input
        # round at 2026-07-28 carries every one the client can answer at once).
        self._show(live, rows[0])
        for row in rows:
            if is_client_request(row.kind):
                # No person answers it: the timeline is where anyone sees what was asked.
                # Written after the run waits (no await between its questions and that),
                # and before any answer's entry (the run's records keep their order).
                text, data = asked_entry(row.kind, row.client_request or {}, row.id)
                await self._note(live, ASKED_ENTRY, text, data)

    @staticmethod
    def _show(live: LiveRun, row: Interaction) -> None:
        live.asks.waiting_on = row
        live.publish(RunUpdate("waiting", live.run_id, live.status, interaction=row))
        # A child run's question reaches whoever follows its parents (the same person).
        parent = live.parent
        while parent is not None and not parent.done.is_set():
            parent.asks.waiting_on = row
            parent.publish(RunUpdate("waiting", parent.run_id, parent.status, interaction=row))
            parent = parent.parent

    async def on_answer(self, live: LiveRun | None, row: Interaction, answer: Answer) -> None:
        """An answer to one of `live`'s questions (given here or, read back, elsewhere)."""
        if live is None or answer.repeated or row.id not in live.asks.pending:
            return
        runs = self.runs
        asks = live.asks
        rid = asks.pending.pop(row.id)
        question = asks.open.pop(row.id, None)
        if question is not None:
            question.span.set_attribute("steamharness.question.outcome", answer.action)
            question.span.end()
        timer = asks.expiry.pop(row.id, None)
        if timer is not None:
            timer.cancel()
        asks.waiting_on = None
        parent = live.parent
        while parent is not None:
            if parent.asks.waiting_on is not None and parent.asks.waiting_on.id == row.id:
                parent.asks.waiting_on = None
            parent = parent.parent
        if answer.action == "cancel" and not is_client_request(row.kind):
            error = {"code": "cancelled", "message": "The person cancelled the run."}
            await runs.terminate(live, RunStatus.CANCELLED, error)
            return
        result: dict[str, Any] = {"action": answer.action, "content": answer.content}
        if is_client_request(row.kind) and answer.action != "accept":
            if row.channel == UNDECLARED_CHANNEL:
                result["reason"] = f"the MCP client did not declare {CLIENT_KINDS[row.kind]}"
                result["undeclared"] = CLIENT_KINDS[row.kind]
            else:
                result["reason"] = f"the MCP client declined the {row.kind} request"
        self._settle(live, rid, row, result)
        if is_client_request(row.kind):
            # After the run's state is settled (an answer to another question of its round
            # may come in meanwhile), and before the resumed handler's own records.
            text, data = answered_entry(
                row.kind,
                row.id,
                action=answer.action,
                content=answer.content,
                channel=row.channel,
                reason=result.get("reason"),
            )
            await self._note(live, ANSWERED_ENTRY, text, data)

    def _settle(self, live: LiveRun, rid: int, row: Interaction, result: dict[str, Any]) -> None:
        """The answer to `rid`'s question `row`: the next question of its round is shown, or
        the handler is answered (its whole round's results, in order) once the run resumes."""
        together = live.asks.rounds.get(rid)
        if together is not None:
            together.results[row.id] = result
            unanswered = [q for q in together.questions if q.id in live.asks.pending]
            if unanswered:
                self._show(live, unanswered[0])
                return
            del live.asks.rounds[rid]
            result = {"results": [together.results[q.id] for q in together.questions]}
        # The run goes on once it has a slot again; whoever answered need not wait for that.
        self.runs.spawn(self._reply_when_resumed(live, rid, result), name=f"resume-{live.run_id}")

    async def _note(self, live: LiveRun, kind: str, text: str, data: dict[str, Any]) -> None:
        """A timeline entry about a question: telling, not deciding, so one the database
        refuses is logged and the run goes on (a busy database keeps it: RunRecordBacklog)."""
        try:
            await self.runs.add_event(live, kind, text=text, data=data)
        except Exception:
            log.exception("run %s: its %s timeline entry was not written", live.run_id, kind)

    async def _reply_when_resumed(self, live: LiveRun, rid: int, result: dict[str, Any]) -> None:
        if not await self.runs.after_wait(live):
            return
        assert live.worker is not None
        await live.worker.send(reply(rid, result=result))

    # ----------------------------------------------------------------- expiry
    def _schedule_expiry(self, live: LiveRun, interaction_id: str, expires_at: datetime) -> None:
        delay = max((expires_at - utcnow()).total_seconds(), 0.0)

        def due() -> None:
            self.runs.spawn(self._expire(live, interaction_id), name=f"expire-{interaction_id}")

        live.asks.expiry[interaction_id] = asyncio.get_running_loop().call_later(delay, due)

    async def _expire(self, live: LiveRun, interaction_id: str) -> None:
        """The question's time is up: the stored row decides (an answer given meanwhile, on
        any replica, wins); an expired question ends its run with `question_expired`."""
        live.asks.expiry.pop(interaction_id, None)
        if live.done.is_set() or interaction_id not in live.asks.pending:
            return
        runs = self.runs
        req = live.request
        try:
            row = await run_db(
                runs.interactions.expire, interaction_id, project_id=req.project.id, actor=req.actor
            )
        except Exception:
            log.exception("interaction %s: expiring it failed; trying again", interaction_id)
            retry = utcnow() + timedelta(seconds=SHARED_POLL_SECONDS)
            self._schedule_expiry(live, interaction_id, retry)
            return
        if row.status == "answered":
            await self.on_answer(live, row, stored_answer(row))
        elif row.status == "pending" and row.expires_at is not None:
            self._schedule_expiry(live, interaction_id, as_utc(row.expires_at))  # not due by its row yet
        elif row.status == "closed":
            limit = _duration(runs.caps.question_timeout_seconds)
            error = {
                "code": "question_expired",
                "message": (
                    f"Nobody answered the question {row.title!r} within {limit}"
                    " (STEAMHARNESS_QUESTION_TIMEOUT_SECONDS); the run stopped."
                ),
                "interactionId": interaction_id,
            }
            await runs.terminate(live, RunStatus.FAILED, error)


def stop_expiry(live: LiveRun) -> None:
    """`live` is ending: none of its questions expires any more."""
    for timer in live.asks.expiry.values():
        timer.cancel()
    live.asks.expiry.clear()


def close_questions(live: LiveRun) -> None:
    """`live` has ended: its questions' spans end (their rows are closed with its outcome);
    it shows no question any more."""
    asks = live.asks
    asks.waiting_on = None
    for question in asks.open.values():
        question.span.set_attribute("steamharness.question.outcome", "closed")
        question.span.end()
    asks.open.clear()


def forget_ended_child_question(live: LiveRun, is_live: Callable[[str], bool]) -> None:
    """A child run `live` waited on ended: the question it showed for that child (or for a
    child of it) goes; its own question stays."""
    shown = live.asks.waiting_on
    if shown is not None and shown.run_id != live.run_id and not is_live(shown.run_id or ""):
        live.asks.waiting_on = None


def stored_answer(row: Interaction) -> Answer:
    """The answer stored in the database (given on another replica)."""
    return Answer(row.id, row.run_id, row.action or "cancel", row.answer)
