"""RunRequest: everything one run needs, built by a transport (or by a parent run for its
child) and executed the same way for all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webui.runs.related import Relations
from webui.runs.types import RunLimits, RunStatus
from webui.store.models import Run
from webui.workflows.project import Entrypoint, Project

if TYPE_CHECKING:
    from webui.configs.model import ConfigSnapshot


# What the audit events of a run an MCP call started say started it (details `call`).
CALL_METHOD = "tools/call"


@dataclass
class RunRequest:
    """Everything a run needs; built by a transport, executed the same way for all."""

    project: Project
    entrypoint: Entrypoint
    params: dict[str, Any]  # for the worker (files as {"$file": {...}} markers)
    stored_params: dict[str, Any]  # for the record (files by id)
    source: str = "mcp"
    transport: str | None = None
    actor: str | None = None
    # The account whose key started the run; it owns the run's questions. None: the
    # admin principal (server admin key, local stdio operator).
    account_id: int | None = None
    session_id: str | None = None
    project_version: str | None = None
    # The run is of the project's draft (its tools are not named in metrics: `_draft`).
    draft: bool = False
    env: dict[str, str] = field(default_factory=dict)
    related: dict[str, str] = field(default_factory=dict)
    limits: RunLimits = field(default_factory=RunLimits)
    # The configuration the run starts with (recorded with the run, read as `ctx.config`).
    config: ConfigSnapshot | None = None
    # The MCP call that starts the run (`tools/call`): its target as asked, client address
    # and user agent, written on the run's own `run.created` and `run.finished` audit events,
    # which are then the call's (one row per fact: no `tool.called`, `tool.completed` or
    # `tool.failed` beside them; webui.store.audit finds them under those names too).
    call: dict[str, Any] | None = None
    # Where `ctx.related[alias]` resolves (None: the run may use no related project).
    relations: Relations | None = None
    # A child run (started by a handler through ctx.related): its parent and how deep.
    parent_run_id: str | None = None
    depth: int = 0

    def audit_fields(self, run_id: str) -> dict[str, Any]:
        """What every audit event about one of this request's runs names."""
        fields: dict[str, Any] = {
            "actor": self.actor,
            "project_id": self.project.id,
            "version": self.project_version,
            "session_id": self.session_id,
            "tool": self.entrypoint.id,
            "run_id": run_id,
            "source": self.source,
        }
        if self.call is not None:
            fields.update(self.call, call=CALL_METHOD)  # AuditLog.record keeps `call` in details
        return fields

    def run_row(self, run_id: str, *, owner: str, replica_id: str | None) -> Run:
        """The run's record as it is created: queued, with the configuration it starts with."""
        return Run(
            id=run_id,
            project_id=self.project.id,
            project_version=self.project_version,
            entrypoint_id=self.entrypoint.id,
            entrypoint_title=self.entrypoint.title or self.entrypoint.id,
            source=self.source,
            transport=self.transport,
            actor=self.actor,
            session_id=self.session_id,
            status=RunStatus.QUEUED.value,
            params=self.stored_params,
            owner=owner,
            replica_id=replica_id,
            account_id=self.account_id,
            parent_run_id=self.parent_run_id,
            config_name=self.config.name if self.config else None,
            config_revision=self.config.revision if self.config else None,
            config_values=self.config.stored if self.config else None,
        )
