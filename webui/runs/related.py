"""Related projects as a run sees them: which aliases `ctx.related` lists, and what an
alias resolves to when the handler runs one of its entrypoints or reads its stores.

The transport builds a `Relations` for the run it starts; the run service asks it to
resolve an alias into a `RelatedTarget` (blocking: it loads project folders) each time
the handler uses one. Over stdio the related folders are the ones given on the command
line (`LocalRelations`); on the server the registry resolves them
(`webui.projects.related.ServerRelations`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from webui.errors import ProjectError
from webui.workflows.project import Project, load_project
from webui.workflows.related import RelatedProjectError, confirm_relation, declared

if TYPE_CHECKING:
    from webui.configs.model import ConfigSnapshot
    from webui.runs.types import RunLimits

# The configuration a child run of this project starts with (its caller's scope, active one).
ConfigFor = Callable[[Project], "ConfigSnapshot"]

# A run started by a tool call has depth 0; its child runs 1, and so on. A run at this
# depth cannot start another: a relation loop (A runs B runs A …) ends with a clear error.
MAX_CHILD_DEPTH = 3


@dataclass(frozen=True)
class RelatedTarget:
    """What an alias resolved to, for one use: the project (at the version a child run
    would use), its worker environment, its run limits and its own relations."""

    alias: str
    project: Project
    version: str | None
    env: dict[str, str]
    relations: Relations
    limits: RunLimits | None = None  # None: no project limits (stdio)
    paths: dict[str, str] = field(default_factory=dict)
    # Takes the configuration snapshot a child run starts with (blocking; None: none).
    config: Callable[[], ConfigSnapshot] | None = None


class Relations(Protocol):
    def ids(self) -> dict[str, str]:
        """alias → project id, for every declared relation (what `ctx.related` lists)."""
        ...

    def paths(self) -> dict[str, str]:
        """alias → project folder, where the folder is the caller's to see (stdio)."""
        ...

    def resolve(self, alias: str) -> RelatedTarget:
        """The related project under `alias`, confirmed by both sides and permitted, or a
        `RelatedProjectError` saying why not. Blocking."""
        ...

    def with_config(self, config_for: ConfigFor) -> Relations:
        """The same relations, their child runs starting with `config_for(project)`."""
        ...


class LocalRelations:
    """stdio: related projects are the folders given with `--related-project`, each
    checked at start; a child run's own relations resolve among the same folders."""

    def __init__(
        self,
        project: Project,
        known: Mapping[str, Project],
        env_for: Callable[[Path], dict[str, str]],
        config_for: ConfigFor | None = None,
    ) -> None:
        self.project = project
        self._known = dict(known)  # project id → loaded project
        self._env_for = env_for
        self._config_for = config_for

    @classmethod
    def confirm(
        cls, project: Project, folders: Mapping[str, str], env_for: Callable[[Path], dict[str, str]]
    ) -> LocalRelations:
        """Every `alias=folder` given: a workflow project, declared under that alias, naming
        this project back. Raises the first problem as one line naming the option."""
        known = {project.id: project}
        for alias, folder in folders.items():
            try:
                other = load_project(Path(folder))
                confirm_relation(project, alias, other)
            except (ProjectError, RelatedProjectError) as exc:
                raise RelatedProjectError(f"--related-project {alias}: {exc.message}") from None
            known[other.id] = other
        return cls(project, known, env_for)

    def with_config(self, config_for: ConfigFor) -> LocalRelations:
        return LocalRelations(self.project, self._known, self._env_for, config_for)

    def ids(self) -> dict[str, str]:
        return {ref.alias: ref.id for ref in self.project.related}

    def paths(self) -> dict[str, str]:
        return {
            ref.alias: str(self._known[ref.id].root) for ref in self.project.related if ref.id in self._known
        }

    def resolve(self, alias: str) -> RelatedTarget:
        ref = declared(self.project, alias)
        other = self._known.get(ref.id)
        if other is None:
            raise RelatedProjectError(
                f"related project {alias!r} ({ref.id}) was not given: start `steamharness mcp` with"
                f" --related-project {alias}=/absolute/folder/of/it"
            )
        confirm_relation(self.project, alias, other)
        child = LocalRelations(other, self._known, self._env_for, self._config_for)
        config_for = self._config_for
        return RelatedTarget(
            alias=alias,
            project=other,
            version=other.version,
            env=self._env_for(other.root),
            relations=child,
            paths=child.paths(),
            config=(lambda: config_for(other)) if config_for is not None else None,
        )
