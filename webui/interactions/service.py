"""Pending interactions: one stored object per question, answerable through any channel.

Channels (inline elicitation, InputRequiredResult rounds, the browser) only deliver the
question and submit answers here. The rules live in one place: only the question's owner
answers it, or an administrator through an explicit override (webui.interactions.owner);
answers are validated against the stored schema; the first valid answer wins; the
identical answer again is accepted; a different one is a conflict.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db
from webui.errors import InteractionClosed, InteractionConflict, InteractionExpired, InvalidAnswer, NotFound
from webui.events import EventHub
from webui.interactions.client_requests import client_content, is_client_request
from webui.interactions.owner import Party, check_answer
from webui.observability.metrics import METRICS
from webui.store import files as file_store
from webui.store import interactions as interaction_store
from webui.store.db import unit_of_work
from webui.store.models import Interaction, as_utc, utcnow
from webui.validation import CheckRefused, SchemaUnusable, describe, problems, run_check

ACTIONS = ("accept", "decline", "cancel")


@dataclass(frozen=True)
class Answer:
    interaction_id: str
    run_id: str | None
    action: str
    content: dict[str, Any] | None
    repeated: bool = False


AnswerListener = Callable[[Interaction, Answer], Awaitable[None]]


def answer_digest(action: str, content: dict[str, Any] | None) -> str:
    canon = json.dumps({"action": action, "content": content}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def new_interaction_id() -> str:
    return f"int_{secrets.token_hex(8)}"


def file_ids_of(row: Interaction, content: dict[str, Any] | None) -> dict[str, list[str]]:
    """The file ids an accepted answer names, per file field of the question."""
    found: dict[str, list[str]] = {}
    for f in row.fields or []:
        if not isinstance(f, dict) or f.get("type") != "file" or not content or f.get("name") not in content:
            continue
        name = f["name"]
        value = content[name]
        values = value if isinstance(value, list) else [value]
        found[str(name)] = [str(v["id"]) for v in values if isinstance(v, dict) and "id" in v]
    return found


def check_files(s: Session, row: Interaction, content: dict[str, Any] | None, project_id: str | None) -> None:
    """Files in an answer must be uploads of the run's own project (unknown ids, and ids of
    other projects, get the same refusal: nothing says another project's file exists)."""
    wanted = file_ids_of(row, content)
    known = file_store.projects_of(s, file_ids=[i for ids in wanted.values() for i in ids])
    problems = [
        f"{name}: unknown file id {file_id!r} for this project"
        for name, ids in wanted.items()
        for file_id in ids
        if project_id is None or known.get(file_id) != project_id
    ]
    if problems:
        raise InvalidAnswer("invalid answer: " + "; ".join(problems))


class InteractionService:
    def __init__(self, engine: Engine, audit: AuditLog, hub: EventHub | None = None) -> None:
        self.engine = engine
        self.audit = audit
        self.hub = hub or EventHub()
        self._listeners: list[AnswerListener] = []

    def on_answer(self, listener: AnswerListener) -> None:
        self._listeners.append(listener)

    def create(
        self,
        *,
        run_id: str | None,
        kind: str,
        title: str,
        message: str | None,
        requested_schema: dict[str, Any],
        fields: list[dict[str, Any]],
        blockers: list[str],
        project_id: str | None = None,
        actor: str | None = None,
        origin: str = "run",
        server_id: str | None = None,
        conversation_id: str | None = None,
        host_call_id: str | None = None,
        url: str | None = None,
        expires_at: datetime | None = None,
        status: str = "pending",
        close_reason: str | None = None,
        input_key: str | None = None,
        client_request: dict[str, Any] | None = None,
    ) -> Interaction:
        row = Interaction(
            id=new_interaction_id(),
            input_key=input_key,
            client_request=client_request,
            run_id=run_id,
            origin=origin,
            kind=kind,
            title=title,
            message=message,
            requested_schema=requested_schema,
            fields=fields,
            blockers=blockers,
            server_id=server_id,
            conversation_id=conversation_id,
            host_call_id=host_call_id,
            url=url,
            expires_at=expires_at,
            status=status,
            close_reason=close_reason,
        )
        self._add([row], project_id=project_id, actor=actor)
        return row

    def create_round(
        self,
        *,
        run_id: str,
        questions: list[dict[str, Any]],
        project_id: str | None,
        actor: str | None,
        expires_at: datetime | None,
    ) -> list[Interaction]:
        """A run's questions asked together (`ctx.together()`), stored in one transaction:
        a reader (another replica, an input round) finds all of them or none. Each of
        `questions` holds `create`'s fields of one question."""
        rows = [
            Interaction(id=new_interaction_id(), run_id=run_id, origin="run", expires_at=expires_at, **q)
            for q in questions
        ]
        self._add(rows, project_id=project_id, actor=actor)
        return rows

    def _add(self, rows: list[Interaction], *, project_id: str | None, actor: str | None) -> None:
        def audit(s: Session) -> None:
            for row in rows:
                self.audit.record(
                    s,
                    AuditName.INTERACTION_REQUESTED,
                    project_id=project_id,
                    run_id=row.run_id,
                    actor=actor,
                    outcome=row.status,
                    source="mcp" if row.origin == "run" else "host",
                    details={
                        "interactionId": row.id,
                        "kind": row.kind,
                        "serverId": row.server_id,
                        "conversationId": row.conversation_id,
                        "callId": row.host_call_id,
                        "reason": row.close_reason,
                    },
                )

        interaction_store.add_interactions(self.engine, rows=rows, audit=audit)
        for row in rows:
            if row.status == "pending":
                self.hub.publish(
                    "interactions",
                    "pending",
                    interactionId=row.id,
                    runId=row.run_id,
                    projectId=project_id,
                    conversationId=row.conversation_id,
                )

    def close(self, interaction_id: str, reason: str) -> bool:
        """End an unanswered interaction (expired, connection closed, shutdown)."""
        row = interaction_store.close_interaction(self.engine, interaction_id=interaction_id, reason=reason)
        if row is None:
            return False
        self.hub.publish(
            "interactions",
            "closed",
            interactionId=interaction_id,
            runId=row.run_id,
            reason=reason,
            conversationId=row.conversation_id,
        )
        return True

    def expire(self, interaction_id: str, *, project_id: str | None, actor: str | None = None) -> Interaction:
        """Blocking: close a run's question as expired if its `expires_at` has passed and
        nobody answered it, with an `interaction.expired` audit event; the row as it stands
        afterwards (`answered` if an answer came first, `pending` if not due yet)."""
        closed: list[bool] = []

        def audit(s: Session) -> None:
            closed.append(True)
            self._audit_expired(s, interaction_id, project_id=project_id, run_id=None, actor=actor)

        row = interaction_store.expire_interaction(self.engine, interaction_id=interaction_id, audit=audit)
        if closed:
            self.hub.publish(
                "interactions",
                "closed",
                interactionId=interaction_id,
                runId=row.run_id,
                reason="expired",
                conversationId=row.conversation_id,
            )
        return row

    def _audit_expired(
        self,
        s: Session,
        interaction_id: str,
        *,
        project_id: str | None,
        run_id: str | None,
        actor: str | None,
    ) -> None:
        row = s.get(Interaction, interaction_id)
        self.audit.record(
            s,
            AuditName.INTERACTION_EXPIRED,
            project_id=project_id,
            run_id=run_id if run_id is not None else (row.run_id if row is not None else None),
            actor=actor,
            outcome="expired",
            source="mcp" if row is None or row.origin == "run" else "host",
            details={"interactionId": interaction_id},
        )

    def get(self, interaction_id: str) -> Interaction:
        row = interaction_store.get_interaction(self.engine, interaction_id=interaction_id)
        if row is None:
            raise NotFound(f"interaction {interaction_id!r} not found")
        return row

    def pending_for_run(self, run_id: str) -> Interaction | None:
        return interaction_store.pending_for_run(self.engine, run_id=run_id)

    def close_for_run(self, run_id: str) -> None:
        """The run ended: its unanswered questions can no longer be answered."""
        closed = interaction_store.close_pending_for_run(self.engine, run_id=run_id, reason="run finished")
        for interaction_id in closed:
            self.hub.publish(
                "interactions", "closed", interactionId=interaction_id, runId=run_id, reason="run finished"
            )

    async def check_answer(self, row: Interaction, action: str, content: Any, *, account: int | None) -> None:
        """Raise InvalidAnswer if this answer to `row` would be refused by its schema (a
        round of several answers is checked whole before any is recorded). Checked in the
        checks' own threads (`run_check`, `account`'s share: who answers), never on the event loop."""
        await run_check(account, self._validate, row, action, content)

    def _validate(self, row: Interaction, action: str, content: Any) -> dict[str, Any] | None:
        """The answer as it is stored, or InvalidAnswer. A JSON Schema check: run it through
        `run_check`, never in a database thread."""
        if action not in ACTIONS:
            raise InvalidAnswer(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        if action != "accept":
            return None
        if is_client_request(row.kind):
            return client_content(row.kind, content)
        content = {} if content is None else content
        if not isinstance(content, dict):
            raise InvalidAnswer("an accepted answer must be an object of field values")
        try:
            found = problems(row.requested_schema, content)
        except CheckRefused as exc:
            raise InvalidAnswer(f"invalid answer: {exc}") from None
        except SchemaUnusable as exc:
            raise InvalidAnswer(
                f"this question's form cannot be checked here ({exc}); decline or cancel it"
            ) from None
        if found:
            raise InvalidAnswer("invalid answer: " + "; ".join(describe(found)))
        return content

    def _answerable(self, interaction_id: str, channel: str, by: Party | None, override: bool) -> Interaction:
        """The question, once `by` may answer it on `channel` (else NotFound, OverrideRequired
        or InvalidAnswer): an answer is checked against the question's schema only after
        that, so nobody learns of another account's question through its problems."""
        with unit_of_work(self.engine) as s:
            found = interaction_store.load_owned(s, interaction_id=interaction_id)
            if found is None:
                raise NotFound(f"interaction {interaction_id!r} not found")
            if by is not None:
                check_answer(by, found.owner, override=override, interaction_id=interaction_id)
            if is_client_request(found.interaction.kind) and not channel.startswith("mcp"):
                raise InvalidAnswer(
                    f"a {found.interaction.kind} request is answered by the MCP client that follows the run"
                )
            return found.interaction

    async def answer(
        self,
        interaction_id: str,
        *,
        action: str,
        content: Any = None,
        actor: str | None = None,
        channel: str,
        by: Party | None = None,
        override: bool = False,
    ) -> Answer:
        """`by`: who answers, checked against the question's owner; None only for the
        channel that started the run itself (it holds no one else's questions)."""
        actor = actor if actor is not None or by is None else by.actor
        asked = await run_db(self._answerable, interaction_id, channel, by, override)
        # Never in a database thread; within the answering account's share of the checks' threads.
        clean = await run_check(by.account_id if by else None, self._validate, asked, action, content)
        row, result = await run_db(
            self._record_answer, interaction_id, action, clean, actor, channel, by, override
        )
        if result.repeated:
            return result
        if row.origin == "run":
            METRICS.questions_answered.labels(row.kind, action, channel).inc()
            waited = (utcnow() - as_utc(row.created_at)).total_seconds()
            METRICS.question_wait.labels(row.kind).observe(max(waited, 0.0))
        self.hub.publish(
            "interactions", "answered", interactionId=row.id, runId=row.run_id, action=action, channel=channel
        )
        for listener in self._listeners:
            await listener(row, result)
        return result

    def _record_answer(
        self,
        interaction_id: str,
        action: str,
        clean: dict[str, Any] | None,
        actor: str | None,
        channel: str,
        by: Party | None,
        override: bool,
    ) -> tuple[Interaction, Answer]:
        with unit_of_work(self.engine) as s:
            found = interaction_store.load_owned(s, interaction_id=interaction_id)
            if found is None:
                raise NotFound(f"interaction {interaction_id!r} not found")
            row, owner, project_id = found.interaction, found.owner, found.project_id
            overridden = (
                check_answer(by, owner, override=override, interaction_id=interaction_id)
                if by is not None
                else False
            )
            if is_client_request(row.kind) and not channel.startswith("mcp"):
                raise InvalidAnswer(
                    f"a {row.kind} request is answered by the MCP client that follows the run"
                )
            check_files(s, row, clean, project_id)  # `clean`: the answer as checked by `_validate`
            digest = answer_digest(action, clean)
            if row.status == "answered":
                if row.answer_digest == digest:
                    return row, Answer(row.id, row.run_id, action, clean, repeated=True)
                raise InteractionConflict(f"interaction {row.id} already has a different answer")
            if row.status == "pending" and row.expires_at is not None and as_utc(row.expires_at) <= utcnow():
                run_id = row.run_id

                def expired(session: Session) -> None:
                    self._audit_expired(
                        session, interaction_id, project_id=project_id, run_id=run_id, actor=None
                    )

                interaction_store.mark_closed(s, row, reason="expired", audit=expired)
                self.hub.publish(
                    "interactions",
                    "closed",
                    interactionId=interaction_id,
                    runId=run_id,
                    reason="expired",
                    conversationId=row.conversation_id,
                )
                raise InteractionExpired(f"interaction {interaction_id} expired before it was answered")
            if row.status == "closed" and row.close_reason == "expired":
                raise InteractionExpired(f"interaction {row.id} expired before it was answered")
            if row.status != "pending":
                raise InteractionClosed(f"interaction {row.id} can no longer be answered")
            details: dict[str, Any] = {"interactionId": row.id, "channel": channel, "override": overridden}
            if overridden:
                details["ownerAccountId"] = owner

            def audit(session: Session) -> None:
                self.audit.record(
                    session,
                    AuditName.INTERACTION_ANSWERED,
                    project_id=project_id,
                    run_id=row.run_id,
                    actor=actor,
                    outcome=action,
                    details=details,
                )

            recorded = interaction_store.mark_answered(
                s,
                row,
                action=action,
                answer=clean,
                digest=digest,
                answered_by=actor,
                override=overridden,
                channel=channel,
                audit=audit,
            )
            if not recorded:
                # No longer pending since it was read: answered first through another channel
                # (as if it had been read answered: the same answer is taken, another is a
                # conflict), or closed (expired, its run ended).
                now = s.get(Interaction, interaction_id, populate_existing=True)
                if now is not None and now.status == "answered":
                    if now.answer_digest == digest:
                        return now, Answer(now.id, now.run_id, action, clean, repeated=True)
                    raise InteractionConflict(f"interaction {interaction_id} already has a different answer")
                if now is not None and now.close_reason == "expired":
                    raise InteractionExpired(f"interaction {interaction_id} expired before it was answered")
                raise InteractionClosed(f"interaction {interaction_id} can no longer be answered")
        return row, Answer(row.id, row.run_id, action, clean)
