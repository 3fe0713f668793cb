"""Child runs: `ctx.related[alias].run(entrypoint, **params)` starts a run of a related
project, owned by the same account (its questions reach the same person) and linked both
ways; the parent waits, its slot given up and its time limit paused, and its handler is
answered with the child's outcome. A child never outlives the run waiting on it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from webui.blocking import run_db
from webui.errors import InvalidArguments, SteamharnessError
from webui.runs.control import ChildControl
from webui.runs.live import LiveRun
from webui.runs.messages import reply
from webui.runs.questions import forget_ended_child_question
from webui.runs.related import MAX_CHILD_DEPTH
from webui.runs.request import RunRequest
from webui.runs.store_calls import resolve_related
from webui.runs.types import RunLimits, RunRefused, RunStatus
from webui.runs.worker_conn import Worker
from webui.store import runs as run_store
from webui.workflows.project import Project
from webui.workflows.related import RelatedProjectError
from webui.workflows.schema import check_arguments, tool_input_schema

log = logging.getLogger(__name__)


class ChildRuns:
    def __init__(self, runs: ChildControl, live_runs: dict[str, LiveRun]) -> None:
        self.runs = runs
        self.live_runs = live_runs

    async def _request(self, live: LiveRun, alias: str, args: dict[str, Any]) -> RunRequest:
        """The child run `args` ask for, checked as a call from a client would be."""
        req = live.request
        if req.depth >= MAX_CHILD_DEPTH:
            raise RelatedProjectError(
                f"related project {alias!r}: this run is already a child run {req.depth} levels deep,"
                f" the limit ({MAX_CHILD_DEPTH}); do the related projects call each other in a loop?"
            )
        target = await run_db(resolve_related, live, alias)
        project: Project = target.project
        ep_id = str(args.get("entrypoint"))
        ep = project.entrypoint(ep_id)
        if ep is None:
            known = ", ".join(repr(e.id) for e in project.entrypoints)
            raise RelatedProjectError(
                f"related project {alias!r} ({project.id}) has no entrypoint {ep_id!r} (it has: {known})"
            )
        params = args.get("params")
        if not isinstance(params, dict):
            raise RelatedProjectError(f"related project {alias!r}: the params must be a JSON object")
        for p in ep.params:
            if p.type == "file" and p.name in params:
                raise RelatedProjectError(
                    f"related project {alias!r}, entrypoint {ep.id!r}: file param {p.name!r} cannot be"
                    " passed to a child run"
                )
        try:
            params = await check_arguments(
                tool_input_schema(ep.params, ep.input_schema, file_mode="server"),
                params,
                tool=ep.id,
                account=live.request.account_id,
            )
        except InvalidArguments as exc:
            raise RelatedProjectError(f"related project {alias!r}: {exc.message}") from None
        config = None
        if target.config is not None:
            try:
                config = await run_db(target.config)
            except SteamharnessError as exc:
                raise RelatedProjectError(f"related project {alias!r}: {exc.message}") from None
        return RunRequest(
            project=project,
            entrypoint=ep,
            params=params,
            stored_params=params,
            source=req.source,
            transport=req.transport,
            actor=req.actor,
            account_id=req.account_id,
            session_id=req.session_id,
            project_version=target.version,
            draft=req.draft,  # a related project runs at the same kind of target as its caller
            env=dict(target.env),
            related=dict(target.paths),
            limits=target.limits or RunLimits(),
            relations=target.relations,
            parent_run_id=live.run_id,
            depth=req.depth + 1,
            config=config,
        )

    def _check_caps(self, live: LiveRun, alias: str) -> None:
        runs = self.runs
        caps = runs.caps
        if live.place.held and (
            full := runs.admission.waiting_full(live.request.account_id, caps.max_waiting_runs)
        ):
            raise RelatedProjectError(f"related project {alias!r}: {full}; try again later")
        # An account's runs waiting for children count against its own cap too: chains of
        # child runs, each level a waiting run, would otherwise let one account fill the
        # server's whole cap while its open questions stay under the account's.
        if (
            live.place.held
            and runs.admission.waiting_of(live.request.account_id) >= caps.max_waiting_per_account
        ):
            raise RelatedProjectError(
                f"related project {alias!r}: this account already has {caps.max_waiting_per_account}"
                " runs waiting (STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT); try again later"
            )

    async def start(self, live: LiveRun, worker: Worker, rid: int, args: dict[str, Any]) -> None:
        """`related.run`: start the child; the parent's handler is answered when it ends."""
        runs = self.runs
        req = live.request
        alias = str(args.get("alias"))
        child_request = await self._request(live, alias, args)
        self._check_caps(live, alias)
        # The parent gives its slot up before the child asks for one: a parent waiting for
        # any child never holds a slot its children need. Its handler's threads may start
        # several; it runs again only once none is pending.
        live.child_waits += 1
        runs.release_slot(live)
        if not live.asks.pending:
            runs.enter(live, RunStatus.WAITING_FOR_CHILD, announce=False)  # recorded once linked
        try:
            child_id = (await runs.start(child_request)).run_id
        except BaseException as exc:
            live.child_waits -= 1
            if isinstance(exc, Exception) and not await runs.after_wait(live):
                raise RelatedProjectError(f"related project {alias!r}: the run is ending") from None
            if isinstance(exc, RunRefused):  # its run gate or queue limit
                raise RelatedProjectError(f"related project {alias!r}: {exc.message}") from None
            raise
        live.children.add(child_id)
        child = self.live_runs[child_id]
        linked = asyncio.Event()
        # Waiting starts at once: whatever happens to the records below, the parent's
        # handler gets its answer when the child ends.
        runs.spawn(self._wait(live, worker, rid, child, linked), name=f"child-{child_id}")
        try:
            project = child_request.project
            link = {"runId": child_id, "projectId": project.id, "entrypointId": child_request.entrypoint.id}
            await runs.add_event(
                live, "child", text=f"started child run {child_id}", data={**link, "alias": alias}
            )
            back = {"runId": live.run_id, "projectId": req.project.id, "entrypointId": req.entrypoint.id}
            await runs.write(
                child,
                run_store.add_event,
                runs.engine,
                run_id=child_id,
                kind="parent",
                text=f"started by run {live.run_id}",
                data=back,
                source=req.source,
            )
            if not live.asks.pending and live.status == RunStatus.WAITING_FOR_CHILD:
                await runs.set_status(live, RunStatus.WAITING_FOR_CHILD)
        except Exception:
            log.exception("run %s: the link to its child run %s could not be recorded", live.run_id, child_id)
        finally:
            linked.set()
        runs.spawn(runs.admission.wake())

    async def _wait(
        self, live: LiveRun, worker: Worker, rid: int, child: LiveRun, linked: asyncio.Event
    ) -> None:
        await child.done.wait()
        await linked.wait()  # the parent's records say it waits before they say it resumed
        live.children.discard(child.run_id)
        live.child_waits -= 1
        if live.done.is_set() or live.concluded:
            return
        lost = {"code": "internal", "message": "The child run ended without an outcome."}
        status, output, error = child.outcome or (RunStatus.FAILED, None, lost)
        forget_ended_child_question(live, self.live_runs.__contains__)
        data = {"runId": child.run_id, "status": str(status)}
        try:
            await self.runs.add_event(
                live, "child", text=f"child run {child.run_id} ended: {status}", data=data
            )
        except Exception:
            log.exception("run %s: the end of its child run %s was not recorded", live.run_id, child.run_id)
        if not await self.runs.after_wait(live):
            return
        result = {"runId": child.run_id, "status": str(status), "output": output, "error": error}
        await worker.send(reply(rid, result=result))
