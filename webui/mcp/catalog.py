"""Structure report -> MCP tools. Fixed for a session: built once per (project, version)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from webui.workflows.contract_diff import Change, ToolContract, diff_catalogs
from webui.workflows.project import Entrypoint, Project
from webui.workflows.schema import FileMode, tool_input_schema

# What every result carries, an error's too: clients check each result with it (the MCP
# Inspector and the TypeScript SDK do, isError or not). `runId` is absent where the call
# failed before a run began (its arguments, a capability, a configuration).
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "runId": {"type": "string", "description": "Absent when the call failed before a run began."},
        "status": {"type": "string"},
        "entrypointId": {"type": "string"},
        "entrypointTitle": {"type": "string"},
        "output": {},
        # The files the run created (ctx.files.create); over stdio also their path and uri.
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "name": {"type": "string"},
                    "mimeType": {"type": "string"},
                    "size": {"type": "integer"},
                    "path": {"type": "string"},
                    "uri": {"type": "string"},
                },
                "required": ["id", "name", "mimeType", "size"],
            },
        },
    },
    "required": ["status", "entrypointId", "entrypointTitle"],
}


def server_name(project: Project) -> str:
    return f"workflow-{project.id}"


@dataclass
class Catalog:
    project: Project
    file_mode: FileMode
    tools: list[types.Tool] = field(default_factory=list)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def build(cls, project: Project, *, file_mode: FileMode) -> Catalog:
        catalog = cls(project=project, file_mode=file_mode)
        for ep in project.entrypoints:
            schema = tool_input_schema(ep.params, ep.input_schema, file_mode=file_mode)
            catalog.schemas[ep.id] = schema
            catalog.tools.append(
                types.Tool(
                    name=ep.id,
                    title=ep.title,
                    description=ep.description,
                    input_schema=schema,
                    output_schema=OUTPUT_SCHEMA,
                )
            )
        return catalog

    def entrypoint(self, name: str) -> Entrypoint | None:
        return self.project.entrypoint(name)

    def contracts(self) -> list[ToolContract]:
        """The tools as a client sees them, for comparing two catalogs."""
        return [
            ToolContract(
                name=t.name,
                input_schema=t.input_schema,
                output_schema=t.output_schema,
                title=t.title,
                description=t.description,
            )
            for t in self.tools
        ]


def contract_changes(old: Project | None, new: Project) -> list[Change]:
    """How the tools clients of `old` (None: no version yet) see change in `new`, as the
    server lists them."""
    before = Catalog.build(old, file_mode="server").contracts() if old is not None else []
    return diff_catalogs(before, Catalog.build(new, file_mode="server").contracts())
