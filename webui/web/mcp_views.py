"""What the project MCP page shows of a target: its tools as the endpoint lists them (with
their parameters and Try it forms), the targets to pick from, and which of the viewer's
configurations calls will use."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from webui.auth.ui import UiUser
from webui.configs.places import account_place
from webui.configs.service import ConfigService
from webui.errors import ProjectError
from webui.mcp.catalog import Catalog
from webui.projects.registry import ProjectRegistry, Resolved
from webui.web import forms
from webui.web.mcp_clients import page_url, pretty_json
from webui.workflows.params import Param


@dataclass(frozen=True)
class ParamRow:
    name: str
    title: str | None
    type: str
    required: bool
    default: str | None  # JSON text, None when there is no default
    options: list[tuple[str, str | None]]  # (JSON value, label)
    format: str | None
    description: str | None
    header: str | None = None  # mirrored as the `Mcp-Param-<header>` HTTP header


@dataclass(frozen=True)
class ToolView:
    dom: str  # a selector-safe id part (tool names may contain dots)
    name: str
    title: str | None
    description: str | None
    params: list[ParamRow]
    schema: dict[str, Any]
    schema_json: str
    fields: list[forms.Field]
    # The entrypoint gives its own `inputSchema` (JSON Schema 2020-12) instead of params.
    own_schema: bool = False
    # The client capabilities a caller must declare (`"requires"`), e.g. ("sampling",).
    requires: tuple[str, ...] = ()
    # `"task"`: "never", "optional" or "required" (MCP tasks, webui.mcp.tasks).
    task: str = "optional"

    @property
    def prefix(self) -> str:
        return f"{self.dom}-"


def _param_row(p: Param) -> ParamRow:
    kind = f"{p.type} (multiple)" if p.multiple and p.type != "checkboxes" else p.type
    return ParamRow(
        name=p.name,
        title=p.title,
        type=kind,
        required=p.required,
        default=json.dumps(p.default, ensure_ascii=False) if p.has_default else None,
        options=[(json.dumps(o.value, ensure_ascii=False), o.label) for o in p.options],
        format=p.format,
        description=p.description,
        header=p.header,
    )


def catalog_view(resolved: Resolved) -> list[ToolView]:
    """The tools exactly as the endpoint lists them for this target (server file mode)."""
    catalog = Catalog.build(resolved.project, file_mode="server")
    views: list[ToolView] = []
    for index, tool in enumerate(catalog.tools, start=1):
        ep = catalog.entrypoint(tool.name)
        schema = dict(tool.input_schema)
        views.append(
            ToolView(
                dom=f"t{index}",
                name=tool.name,
                title=tool.title,
                description=tool.description,
                params=[_param_row(p) for p in ep.params] if ep is not None else [],
                schema=schema,
                schema_json=pretty_json(schema),
                fields=forms.fields(schema),
                own_schema=ep is not None and ep.input_schema is not None,
                requires=ep.requires if ep is not None else (),
                task=ep.task if ep is not None else "optional",
            )
        )
    return views


@dataclass(frozen=True)
class TargetChoice:
    label: str  # what goes into ?target=
    text: str
    detail: str | None
    href: str


def target_choices(
    registry: ProjectRegistry, project_id: str, config: str | None = None
) -> list[TargetChoice]:
    online = registry.online_versions(project_id)
    try:
        revision: str | None = registry.draft_revision(project_id)
    except (OSError, ProjectError):
        revision = None  # the folder is gone; resolving the draft explains why
    latest = f"now {online[0].version}" if online else "no online version"
    choices = [
        TargetChoice("draft", "Draft", revision, page_url(project_id, "draft", config)),
        TargetChoice("latest", "Latest", latest, page_url(project_id, "latest", config)),
    ]
    choices += [
        TargetChoice(v.version, v.version, None, page_url(project_id, v.version, config)) for v in online
    ]
    return choices


@dataclass(frozen=True)
class ConfigChoice:
    name: str | None  # what goes into &config= (None: the active one at each call)
    text: str
    href: str


@dataclass(frozen=True)
class ConfigUse:
    """Which of the viewer's configurations tool calls will use: the one picked with
    `&config=`, else the account's active one (at each call; shown as it is now)."""

    picked: str | None
    name: str | None  # None: the picked configuration does not exist
    revision: int | None
    problems: dict[str, str]
    missing: str | None
    choices: list[ConfigChoice]


def config_use(
    configs: ConfigService, user: UiUser, resolved: Resolved, target: str, picked: str | None
) -> ConfigUse | None:
    """None for a project that declares no configuration fields."""
    project = resolved.project
    if not project.config_fields:
        return None
    place = account_place(
        project.id, project.config_fields, account_id=user.account_id, account_name=user.name
    )
    views = configs.list(place)
    used = (
        next((v for v in views if v.name == picked), None) if picked else next(v for v in views if v.active)
    )
    choices = [ConfigChoice(None, "Active (at each call)", page_url(project.id, target))]
    choices += [ConfigChoice(v.name, v.name, page_url(project.id, target, v.name)) for v in views]
    if used is None:
        missing = (
            f"You have no configuration {picked!r} for this project: calls through this URL fail "
            "with config_not_found."
        )
        return ConfigUse(picked, None, None, {}, missing, choices)
    return ConfigUse(picked, used.name, used.revision, used.problems, None, choices)
