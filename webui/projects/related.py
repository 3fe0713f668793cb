"""Related projects on the server: an alias of the calling project resolved through the
registry, at the same kind of target as the caller (the draft when it runs its draft,
otherwise the related project's latest online version), with run permission on the
related project required of the caller, and the relation confirmed by both projects as
they stand in what was resolved."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from webui.errors import NotFound, ProjectError, SteamharnessError
from webui.runs.related import ConfigFor, RelatedTarget
from webui.workflows.project import Project
from webui.workflows.related import RelatedProjectError, confirm_relation, declared
from webui.workflows.targets import Target

if TYPE_CHECKING:
    from webui.projects.registry import ProjectRegistry
    from webui.runs.types import RunLimits
    from webui.store.models import ProjectRecord


class ServerRelations:
    def __init__(
        self,
        *,
        registry: ProjectRegistry,
        project: Project,
        draft: bool,
        require_run: Callable[[str], None],
        env_for: Callable[[Path], dict[str, str]],
        limits_for: Callable[[ProjectRecord], RunLimits],
        config_for: ConfigFor | None = None,
    ) -> None:
        self.registry = registry
        self.project = project
        self.draft = draft
        self._require_run = require_run  # raises (Forbidden) without run permission
        self._env_for = env_for
        self._limits_for = limits_for
        self._config_for = config_for

    def with_config(self, config_for: ConfigFor) -> ServerRelations:
        return self._for(self.project, config_for)

    def _for(self, project: Project, config_for: ConfigFor | None) -> ServerRelations:
        return ServerRelations(
            registry=self.registry,
            project=project,
            draft=self.draft,
            require_run=self._require_run,
            env_for=self._env_for,
            limits_for=self._limits_for,
            config_for=config_for,
        )

    def ids(self) -> dict[str, str]:
        return {ref.alias: ref.id for ref in self.project.related}

    def paths(self) -> dict[str, str]:
        return {}  # server folders are not the caller's to see

    def resolve(self, alias: str) -> RelatedTarget:
        ref = declared(self.project, alias)
        what = f"related project {alias!r} ({ref.id})"
        try:
            self._require_run(ref.id)
        except SteamharnessError as exc:
            raise RelatedProjectError(f"{what}: {exc.message}") from None
        try:
            record = self.registry.record(ref.id)
        except NotFound:
            raise RelatedProjectError(f"{what} is not registered on this server") from None
        try:
            resolved = self.registry.resolve(ref.id, Target("draft" if self.draft else "latest"))
        except (NotFound, ProjectError) as exc:
            raise RelatedProjectError(f"{what}: {exc.message}") from None
        other = resolved.project
        confirm_relation(self.project, alias, other)
        config_for = self._config_for
        return RelatedTarget(
            alias=alias,
            project=other,
            version=resolved.version or resolved.revision,
            env=self._env_for(other.root),
            relations=self._for(other, config_for),
            limits=self._limits_for(record),
            config=(lambda: config_for(other)) if config_for is not None else None,
        )
