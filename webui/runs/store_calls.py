"""The worker's calls answered at once from the server's stores: `kv.*`, `values.*`,
`knowledge.*`, a related project's `related.kv.get` / `related.values.get` /
`related.knowledge.search|get`, and `files.create`.

The knowledge calls (`answer_knowledge`) are awaited: a search or an add fetches its embeddings
outside any database thread, between its database steps (each one of the run's writes,
`run`), within the allowance of the account that started the run (webui.knowledge.gates)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy.engine import Engine

from webui.blocking import DatabaseBusy
from webui.errors import SteamharnessError
from webui.files.store import FileStore, output_view, worker_view
from webui.knowledge.model import Actor
from webui.knowledge.service import KnowledgeService, Runner
from webui.runs.live import LiveRun
from webui.runs.related import RelatedTarget
from webui.runs.worker_conn import Worker
from webui.store import kv as kv_store
from webui.store import runs as run_store
from webui.store.models import KVEntry, PersistentValue
from webui.workflows.related import RelatedProjectError


@contextlib.contextmanager
def take_staged_file(create_dir: str, tmp_path: str, *, owner: int) -> Iterator[BinaryIO]:
    """Open a file a worker staged for ctx.files.create; it is unlinked once done with
    (unless the database was busy: the retry takes it again). The server may have more
    rights than the worker, so nothing that could point elsewhere is followed: only a
    plain file, directly in the run's staging directory, owned by the worker, one link."""
    refused = SteamharnessError("files.create: the file must be written by ctx.files.create")
    folder, name = os.path.split(os.path.normpath(tmp_path))
    if folder != os.path.normpath(create_dir) or name in ("", ".", ".."):
        raise refused
    dir_fd = os.open(create_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            raise refused from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != owner:
            os.close(fd)
            raise refused
        try:
            with os.fdopen(fd, "rb") as src:
                yield src
        except DatabaseBusy:
            raise  # kept for the retry to take again
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def resolve_related(live: LiveRun, alias: str) -> RelatedTarget:
    """Where `ctx.related[alias]` of this run points (blocking: it may read a project)."""
    relations = live.request.relations
    if relations is None:
        raise RelatedProjectError(f"related project {alias!r}: this run may use no related projects")
    return relations.resolve(alias)


class StoreCalls:
    """Blocking; each call is one of the run's writes (in a thread, retried while busy)."""

    def __init__(
        self,
        *,
        engine: Engine,
        kv_engine: Engine,
        values_engine: Engine,
        files: FileStore,
        file_create_dir: Path,
        knowledge: KnowledgeService | None = None,
    ) -> None:
        self.engine = engine
        self.knowledge = knowledge
        self.files = files
        self.file_create_dir = file_create_dir
        self._stores: dict[str, tuple[Engine, type[KVEntry] | type[PersistentValue]]] = {
            "kv": (kv_engine, KVEntry),
            "values": (values_engine, PersistentValue),
        }

    def serve(self, live: LiveRun, op: str, args: dict[str, Any]) -> Any:
        project_id = live.request.project.id
        stores = self._stores
        family, _, verb = op.partition(".")
        if family == "related":
            # ctx.related[alias].kv / .values: the related project's stores, read-only
            store, _, verb = verb.partition(".")
            if store in stores and verb == "get":
                target = resolve_related(live, str(args.get("alias")))
                engine, table = stores[store]
                key = str(args.get("key"))
                found, value = kv_store.get_value(engine, table, project_id=target.project.id, key=key)
                return {"found": found, "value": value}
        if family in stores:
            engine, table = stores[family]
            key = str(args.get("key"))
            if verb == "get":
                found, value = kv_store.get_value(engine, table, project_id=project_id, key=key)
                return {"found": found, "value": value}
            if verb == "set":
                kv_store.set_value(engine, table, project_id=project_id, key=key, value=args.get("value"))
                return None
            if verb == "delete":
                return kv_store.delete_value(engine, table, project_id=project_id, key=key)
        raise SteamharnessError(f"unknown operation {op!r}")

    @staticmethod
    def is_knowledge(op: str) -> bool:
        """Whether `op` is a knowledge call (answered by `answer_knowledge`, awaited)."""
        return op.startswith("knowledge.") or op.startswith("related.knowledge.")

    async def answer_knowledge(
        self, live: LiveRun, op: str, args: dict[str, Any], run: Callable[..., Awaitable[Any]]
    ) -> Any:
        """ctx.knowledge (and a related project's, read-only): search and get; add and
        remove where the entrypoint declares `"knowledge": "write"`. `run` runs a blocking
        step as one of the run's writes."""
        if op.startswith("related."):
            verb = op.removeprefix("related.knowledge.")
            if verb not in ("search", "get"):
                raise SteamharnessError(f"unknown operation {op!r}")
            target = await run(resolve_related, live, str(args.get("alias")))
            return await self._knowledge(live, target.project.id, verb, args, run, writable=False)
        verb = op.removeprefix("knowledge.")
        writable = live.request.entrypoint.knowledge_write
        return await self._knowledge(live, live.request.project.id, verb, args, run, writable=writable)

    async def _knowledge(
        self, live: LiveRun, project_id: str, verb: str, args: dict[str, Any], run: Runner, *, writable: bool
    ) -> Any:
        kb = self.knowledge
        if kb is None:
            raise SteamharnessError("this server has no knowledge base")
        account = live.request.actor or "local"  # whose allowance the run's embeddings use
        if verb == "search":
            return await kb.search_async(
                project_id,
                args.get("query"),  # type: ignore[arg-type]
                account=account,
                collection=args.get("collection"),
                filter=args.get("filter"),
                limit=args.get("limit"),
                mode=str(args.get("mode") or "auto"),
                run=run,
            )
        if verb == "get":
            return await run(kb.get, project_id, args.get("id"))
        if verb in ("add", "remove"):
            if not writable:
                raise SteamharnessError(
                    f"ctx.knowledge.{verb}: this entrypoint may only read the knowledge base"
                    ' (declare "knowledge": "write")'
                )
            actor = Actor(actor=live.request.actor or "run", source="run", run_id=live.run_id)
            if verb == "remove":
                return await run(kb.remove, project_id, args.get("id"), actor=actor)
            return await kb.add_async(
                project_id,
                args.get("collection"),  # type: ignore[arg-type]
                actor=actor,
                account=account,
                text=args.get("text"),
                doc_id=args.get("id"),
                title=args.get("title"),
                metadata=args.get("metadata"),
                run=run,
            )
        raise SteamharnessError(f"unknown operation knowledge.{verb}")

    def create_file(self, live: LiveRun, worker: Worker, args: dict[str, Any]) -> dict[str, Any]:
        """ctx.files.create: copy the file the worker staged into the created-files folder."""
        project_id = live.request.project.id
        assert worker.scratch is not None
        with take_staged_file(worker.scratch, str(args.get("tmp_path")), owner=worker.uid) as src:
            row = self.files.adopt(
                project_id=project_id,
                src=src,
                name=str(args.get("name") or "output"),
                mime_type=str(args.get("mime_type") or "application/octet-stream"),
                run_id=live.run_id,
                created_dir=self.file_create_dir,
            )
        live.created.append(output_view(row))
        run_store.add_event(
            self.engine,
            run_id=live.run_id,
            kind="file",
            data={"id": row.id, "name": row.name, "size": row.size},
            source=live.request.source,
        )
        return worker_view(row)
