"""This `serve` process as one replica of the server: its id, its lease, and cleaning up
after replicas that stopped without saying so.

Several serve processes, each with its own data dir, sharing one database, secret key and
shared dir are one server. Each has a replica id, kept in its data dir (`replica-id`) so a
restart is the same replica again, and a lease row in the database it renews every TTL/3
seconds. A replica whose lease is older than the TTL is gone: any other replica closes its
MCP session rows, then marks its active runs interrupted (their workers died with it). A
replica restarting marks its own previous runs interrupted at once.

Local processes (stdio MCP, the CLI) are no replicas: several may share a data dir, so a
shared id would have them end each other's runs; their runs are judged by their process
(`webui.store.runs.owner_alive`), as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy.engine import Connection, Engine

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db
from webui.errors import ConfigError
from webui.interactions.service import InteractionService
from webui.store import replicas as replica_store
from webui.store.models import as_utc, utcnow

log = logging.getLogger(__name__)

ID_FILE = "replica-id"
ID_RE = re.compile(r"^rep_[0-9a-f]{16}$")
LOST = {"code": "interrupted", "message": "The server replica running this run stopped before it finished."}
RESTARTED = {"code": "interrupted", "message": "The server stopped while this run was active."}


class ReplicaInUse(ConfigError):
    code = "replica_in_use"


def replica_id_for(data_dir: Path) -> str:
    """The replica id kept in `data_dir` (made on first use; the first process to make it wins)."""
    path = data_dir / ID_FILE
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    else:
        if not ID_RE.fullmatch(value):
            raise ConfigError(
                f"{path}: not a replica id (rep_ and 16 hex digits); remove it to make a new one"
            )
        return value
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    value = f"rep_{secrets.token_hex(8)}"
    tmp = path.with_name(f".{ID_FILE}.{os.getpid()}")
    tmp.write_text(value + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)
    except FileExistsError:
        value = path.read_text(encoding="utf-8").strip()
    finally:
        tmp.unlink()
    return value


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def check_free(engine: Engine, *, replica_id: str, ttl: float, host: str, pid: int) -> None:
    """`ReplicaInUse` if another live process holds `replica_id` (one data dir served twice):
    its lease is fresh, and it is not a process on this host that is gone (killed a moment
    ago, so this restart takes over)."""
    held = replica_store.get_replica(engine, replica_id=replica_id)
    if held is None or (held.host, held.pid) == (host, pid):
        return
    if as_utc(held.heartbeat_at) < utcnow() - timedelta(seconds=ttl):
        return
    if held.host == host and _process_gone(held.pid):
        return
    raise ReplicaInUse(
        f"replica {replica_id} (this data dir) is already served by process {held.pid} on"
        f" {held.host}; give each serve process its own --data-dir"
    )


class ReplicaLease:
    def __init__(
        self,
        engine: Engine,
        *,
        replica_id: str,
        ttl: float,
        interactions: InteractionService,
        audit: AuditLog,
    ) -> None:
        self.engine = engine
        self.replica_id = replica_id
        self.ttl = ttl
        self.interval = ttl / 3
        self.interactions = interactions
        self.audit = audit
        self.host = socket.gethostname()
        self.pid = os.getpid()

    # ----------------------------------------------------------------- blocking (run_db)
    def check_free(self) -> None:
        check_free(self.engine, replica_id=self.replica_id, ttl=self.ttl, host=self.host, pid=self.pid)

    def claim(self) -> list[str]:
        """At start: take the lease, mark this replica's previous runs interrupted (its workers
        died with it), then sweep. Returns the runs marked."""
        self.check_free()
        replica_store.claim(self.engine, replica_id=self.replica_id, host=self.host, pid=self.pid)
        mine = self._interrupt(self.replica_id, RESTARTED, lapsed_before=None, reason="replica restarted")
        return mine + self.sweep()

    def beat(self) -> list[str]:
        """Renew the lease, then sweep; returns the runs the sweep marked."""
        if not replica_store.heartbeat(self.engine, replica_id=self.replica_id, host=self.host, pid=self.pid):
            held = replica_store.get_replica(self.engine, replica_id=self.replica_id)
            if held is not None:
                log.error(
                    "replica %s: process %s on %s took this replica's lease; each serve process needs"
                    " its own --data-dir",
                    self.replica_id,
                    held.pid,
                    held.host,
                )
                return []
            replica_store.claim(self.engine, replica_id=self.replica_id, host=self.host, pid=self.pid)
        return self.sweep()

    def sweep(self) -> list[str]:
        """Close the MCP session rows, then interrupt the runs, of replicas whose lease lapsed.

        Sessions first: whoever sees one of those runs interrupted sees its sessions closed.
        Both steps are conditional updates, so a sweep that fails half way is finished by the
        next one (a replica with active runs is still lapsed for it), and never twice. Not one
        transaction: each run is marked in its own, with its timeline entry and audit event,
        and that replica's sessions need no run to be closed."""
        before = utcnow() - timedelta(seconds=self.ttl)
        marked: list[str] = []
        for other in replica_store.lapsed_replicas(self.engine, before=before, exclude=self.replica_id):
            closed = replica_store.close_sessions(
                self.engine, replica_id=other, reason="replica lost", lapsed_before=before
            )
            runs = self._interrupt(other, LOST, lapsed_before=before, reason="lease expired")
            if runs or closed:
                log.warning(
                    "replica %s is gone (no heartbeat for %ss): %d runs interrupted, %d sessions closed",
                    other,
                    self.ttl,
                    len(runs),
                    closed,
                )
            marked += runs
        return marked

    def release(self) -> None:
        replica_store.release(self.engine, replica_id=self.replica_id, host=self.host, pid=self.pid)

    def _interrupt(
        self, replica_id: str, error: dict[str, Any], *, lapsed_before: Any, reason: str
    ) -> list[str]:
        projects: dict[str, str] = {}

        def audit(conn: Connection, run_id: str, project_id: str) -> None:
            projects[run_id] = project_id
            self.audit.record(
                conn,
                AuditName.RUN_INTERRUPTED,
                actor=f"replica:{self.replica_id}",
                project_id=project_id,
                run_id=run_id,
                outcome="interrupted",
                details={"replica": replica_id, "reason": reason},
            )

        ids = replica_store.interrupt_runs(
            self.engine, replica_id=replica_id, error=error, lapsed_before=lapsed_before, audit=audit
        )
        for run_id in ids:
            self.interactions.close_for_run(run_id)
            if self.audit.hub is not None:  # live pages show the run ended (on every replica)
                self.audit.hub.publish(
                    "runs", "status", runId=run_id, projectId=projects.get(run_id), status="failed"
                )
        return ids

    # ----------------------------------------------------------------- async
    async def keep(self) -> None:
        """Renew the lease and sweep every TTL/3 seconds until cancelled; a failed round
        (the database busy or away) is logged and the next one tries again."""
        while True:
            await anyio.sleep(self.interval)
            try:
                await run_db(self.beat)
            except Exception:
                log.exception("replica %s: renewing the lease failed", self.replica_id)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await run_db(self.release)
