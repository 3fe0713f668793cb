"""What a request is bound to: which project (and version), which principal, which
transport. One channel carries it to the handlers, the ContextVar `current_binding`: stdio
sets it once; the HTTP gateway sets it around each request it hands the SDK, which runs
the request's handler in the sender's context (both protocol eras). `HttpBindings` builds
the HTTP ones: a catalog per resolved version, what the target resolved to (whose limits a
run is admitted under: webui.projects.limits), the related projects a binding may call."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
from starlette.types import Scope

from webui.auth.keys import Authenticator, Principal
from webui.configs.model import NAME_RE, ConfigPlace
from webui.configs.places import account_place, local_place_of
from webui.errors import ConfigurationRefused
from webui.mcp.catalog import Catalog
from webui.projects.limits import ProjectLimits
from webui.projects.registry import ProjectRegistry, Resolved
from webui.projects.related import ServerRelations
from webui.runs.env import worker_env
from webui.runs.related import Relations
from webui.workflows.project import Project

current_binding: contextvars.ContextVar[Binding] = contextvars.ContextVar("steamharness_mcp_binding")
# Set by the HTTP edge around each request it hands the SDK, in the same way: the event is
# set once the request's response can no longer complete (its client went away). A 2025
# session's SDK leaves the handler running then; the bridge ends the call and its run.
client_left: contextvars.ContextVar[anyio.Event] = contextvars.ContextVar("steamharness_mcp_client_left")


@dataclass(frozen=True)
class Binding:
    catalog: Catalog
    principal: str  # what sealed request state is bound to (never a raw key)
    transport: str  # "stdio" | "http"
    actor: str | None = None
    # The credential's account, which owns the runs (and questions) of this binding.
    # None: the admin principal (the server admin key, the local stdio operator).
    account_id: int | None = None
    target: str | None = None
    version: str | None = None
    session_id: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    related: Mapping[str, str] = field(default_factory=dict)
    # Where the project's related projects resolve (None: it may use none).
    relations: Relations | None = None
    # Where a person can answer; "{interactionId}" and "{runId}" are filled in.
    answer_hint: str | None = None
    # The server's address as the client reached it (HTTP), for links to its pages.
    base_url: str | None = None
    # The configuration runs start with: this name, or (None) the scope's active one at call
    # time. The scope: stdio, the local operator's; HTTP, the account's (or the admin principal's).
    config_name: str | None = None
    account_name: str | None = None
    # What the HTTP target resolved to: its run gate, queue limits and a changed draft are
    # re-checked before every tool call (ProjectLimits.limits_for). None: no project limits
    # (stdio).
    resolved: Resolved | None = None


def chosen_config(name: str | None, where: str) -> str | None:
    """A configuration name picked for a binding (`--config`, `&config=`), syntax checked."""
    if name is not None and not NAME_RE.fullmatch(name):
        raise ConfigurationRefused(
            f"{where} {name!r} is not a valid configuration name: 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return name


def config_place(b: Binding, project: Project | None = None) -> ConfigPlace:
    """Where the binding's runs take their configuration from: the fields of the project
    being run, in the local operator's scope (stdio) or the account's (HTTP). `project`: a
    related project whose child run the binding's caller starts."""
    project = project or b.catalog.project
    if b.transport == "stdio":
        return local_place_of(project.id, project.config_fields)
    return account_place(
        project.id, project.config_fields, account_id=b.account_id, account_name=b.account_name
    )


class HttpBindings:
    """The bindings of the HTTP endpoint, one per request or session, for a resolved target."""

    def __init__(
        self,
        *,
        registry: ProjectRegistry,
        authenticator: Authenticator,
        env: dict[str, str],
        limits: ProjectLimits,
        public_url: str | None = None,
    ) -> None:
        self.registry = registry
        self.auth = authenticator
        self.env = env
        self.limits = limits
        # Where people reach the server (`STEAMHARNESS_PUBLIC_URL`, e.g. the load balancer's
        # address); without it, the request's own scheme and Host.
        self.public_url = public_url.rstrip("/") if public_url else None
        self._catalogs: dict[tuple[str, str], Catalog] = {}

    def bind(
        self,
        scope: Scope,
        principal: Principal,
        resolved: Resolved,
        session_id: str | None,
        config: str | None,
    ) -> Binding:
        pid = resolved.project.id
        base = self.public_url or base_url(scope)
        hint = (
            f"Answer it in the browser at {base}/inbox#interaction-{{interactionId}}, or POST the answer to "
            f"{base}/api/interactions/{{interactionId}}/answer; then read GET {base}/api/runs/{{runId}}."
        )
        return Binding(
            catalog=self._catalog(resolved),
            principal=f"{principal.fingerprint}|{pid}|{resolved.target.label}",
            transport="http",
            actor=principal.actor,
            account_id=principal.account_id,
            target=resolved.target.label,
            version=resolved.version or resolved.revision,
            session_id=session_id,
            env=worker_env(resolved.project.root, self.env),
            answer_hint=hint,
            base_url=base,
            resolved=resolved,
            relations=ServerRelations(
                registry=self.registry,
                project=resolved.project,
                draft=resolved.target.kind == "draft",
                require_run=lambda project_id: self.auth.current(principal).require_run(project_id),
                env_for=lambda root: worker_env(root, self.env),
                limits_for=self.limits.of,
            ),
            config_name=config,
            account_name=principal.actor.removeprefix("user:") if principal.account_id is not None else None,
        )

    def _catalog(self, resolved: Resolved) -> Catalog:
        key = (resolved.project.id, resolved.key)
        if key not in self._catalogs:
            self._catalogs[key] = Catalog.build(resolved.project, file_mode="server")
        return self._catalogs[key]


def request_headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def base_url(scope: Scope) -> str:
    headers = request_headers(scope)
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"
