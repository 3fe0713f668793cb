"""`package.json` as a JSON Schema: the fields the loader reads (`project.py`, `params.py`,
`configuration.py`, `related.py`), their types and allowed values taken from the loader's own
constants. The docs site's reference page is generated from it (`docs/generate.py`), and
`tests/workflows/test_package_schema.py` holds it to the loader: every key the loader reads
is here, and every project the loader accepts in the repository fits it.

The loader stays the judge: it checks what a schema cannot say (a handler file that exists
inside the project, a default that is one of its options, a relation both sides name), and
it ignores fields it does not know, so the schema allows them too."""

from __future__ import annotations

from typing import Any, Final

from webui.workflows.configuration import FIELD_TYPES, MAX_FIELDS
from webui.workflows.package_json import UUID_RE
from webui.workflows.params import DATE_FORMATS, HEADER_NAME_RE, HEADER_TYPES, NAME_RE, PARAM_TYPES
from webui.workflows.project import (
    _ENTRYPOINT_ID_RE,  # pyright: ignore[reportPrivateUsage]
    CLIENT_CAPABILITIES,
    RESULT_TEXTS,
    TASK_DEFAULT,
    TASK_MODES,
    WORKFLOW_PROJECT_TYPE,
)
from webui.workflows.related import ALIAS_RE


def _anchored(pattern: str) -> str:
    return f"^(?:{pattern})$"


_OPTION: Final[dict[str, Any]] = {
    "description": "A static choice: a bare value, or `{value, label}` (the label is what a person sees).",
    "anyOf": [
        {"type": ["string", "number", "boolean"]},
        {
            "type": "object",
            "required": ["value"],
            "properties": {"value": {"type": ["string", "number", "boolean"]}, "label": {"type": "string"}},
        },
    ],
}

PARAM: Final[dict[str, Any]] = {
    "type": "object",
    "description": "One input of an entrypoint (and the format of `ctx.ask` fields): it becomes one "
    "property of the tool's input schema.",
    "required": ["name", "type"],
    "properties": {
        "name": {
            "type": "string",
            "pattern": _anchored(NAME_RE.pattern),
            "description": "The argument's name: letters, digits and `_`, not starting with a digit; "
            "unique within the entrypoint.",
        },
        "type": {
            "enum": list(PARAM_TYPES),
            "description": "`positional` is a string shown first; `checkboxes` a list of strings from "
            'its options; `file` a managed file (`{"id": "wf_…"}` over HTTP, an absolute path over '
            "stdio). An `integer`'s default and options are JSON integers.",
        },
        "required": {"type": "boolean", "description": "The call must give it (default false)."},
        "multiple": {
            "type": "boolean",
            "description": "The value is a list (always, for `checkboxes`).",
        },
        "title": {
            "type": "string",
            "description": "A person's name for it (`label` is taken as its synonym).",
        },
        "label": {"type": "string", "description": "Same as `title` (`title` wins)."},
        "description": {"type": "string", "description": "What it is, for the client and the person."},
        "default": {
            "description": "A valid value of the param (one of its options, if it has any); file params "
            "have none."
        },
        "options": {
            "type": "array",
            "items": _OPTION,
            "description": "The allowed values (not for file params).",
        },
        "format": {"enum": list(DATE_FORMATS), "description": "string and positional params only."},
        "header": {
            "type": "string",
            "pattern": _anchored(HEADER_NAME_RE.pattern),
            "description": "Mirror the argument as the `Mcp-Param-<header>` HTTP header (2026-07-28, "
            "SEP-2243). Single "
            + ", ".join(sorted(HEADER_TYPES))
            + " params only; names unique without case.",
        },
    },
}

ENTRYPOINT: Final[dict[str, Any]] = {
    "type": "object",
    "description": "One callable workflow: it becomes one MCP tool named `id`.",
    "required": ["id", "handler"],
    "properties": {
        "id": {
            "type": "string",
            "pattern": _anchored(_ENTRYPOINT_ID_RE.pattern),
            "description": "The MCP tool name: 1-64 of `A-Z a-z 0-9 _ . -`, unique in the project.",
        },
        "title": {"type": "string", "description": "Shown to people (default: the id)."},
        "description": {"type": "string", "description": "The tool's description (default: the title)."},
        "handler": {
            "type": "string",
            "pattern": r"^[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*$",
            "description": "`file.py:function`, the file relative to the project and inside it; the "
            "function takes `ctx`.",
        },
        "timeoutSeconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "The run is stopped (SIGTERM, then SIGKILL) past it; time waiting for a "
            "person or a child run does not count.",
        },
        "params": {"type": "array", "items": {"$ref": "#/$defs/param"}, "description": "The tool's inputs."},
        "inputSchema": {
            "type": "object",
            "description": "Instead of `params`: the tool's own JSON Schema 2020-12, served as written "
            "(`type: object`; at most 64 KiB, 32 levels; `$ref` only inside it; no risky patterns).",
        },
        "knowledge": {
            "enum": ["read", "write"],
            "description": "`write`: the handler may add and remove knowledge-base documents "
            "(default `read`).",
        },
        "task": {
            "enum": list(TASK_MODES),
            "description": f"Whether a call may become an MCP task (default `{TASK_DEFAULT}`): `never`, "
            "`optional` (when the run does not end quickly), `required` (only clients declaring the "
            "tasks extension may call it).",
        },
        "resultText": {
            "enum": list(RESULT_TEXTS),
            "description": "The result's text content: the payload as JSON (default), or a string "
            "output itself.",
        },
        "requires": {
            "type": "array",
            "items": {"enum": list(CLIENT_CAPABILITIES)},
            "uniqueItems": True,
            "description": "Client capabilities a caller must declare; others are refused before any run.",
        },
    },
}

CONFIG_FIELD: Final[dict[str, Any]] = {
    "type": "object",
    "description": "One configuration field: each person keeps named configurations of values for "
    "them, and a run reads the active one as `ctx.config`.",
    "required": ["name", "type"],
    "properties": {
        "name": {"type": "string", "pattern": _anchored(NAME_RE.pattern), "description": "Unique."},
        "type": {
            "enum": list(FIELD_TYPES),
            "description": "`date` is `YYYY-MM-DD`; a `secret` is write-only once stored "
            "(encrypted at rest).",
        },
        "required": {"type": "boolean", "description": "A configuration must give it (or its default)."},
        "default": {"description": "A valid value (secrets have none)."},
        "description": {"type": "string", "description": "Shown on the configuration page."},
        "options": {
            "type": "array",
            "items": _OPTION,
            "description": "`select` and `multiselect` only (non-empty strings).",
        },
    },
}

RELATED: Final[dict[str, Any]] = {
    "type": "object",
    "description": "Another workflow project this one may call (`ctx.related[alias]`); it must list "
    "this one back.",
    "required": ["alias", "id"],
    "properties": {
        "alias": {"type": "string", "pattern": _anchored(ALIAS_RE.pattern), "description": "The local name."},
        "id": {
            "type": "string",
            "pattern": _anchored(UUID_RE.pattern),
            "description": "Its package.json id.",
        },
    },
}

PACKAGE_JSON_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "package.json of a workflow project",
    "description": "A workflow project is a folder with a `package.json`: its id, its entrypoints "
    "(each one MCP tool) and what they may use. Unknown fields are ignored; a problem with a known "
    "one is refused in one line naming the file and the field's path.",
    "type": "object",
    "required": ["projectType", "id", "name", "entrypoints"],
    "properties": {
        "projectType": {"const": WORKFLOW_PROJECT_TYPE, "description": "Only workflow projects are served."},
        "id": {
            "type": "string",
            "pattern": _anchored(UUID_RE.pattern),
            "description": "The project's UUID (8-4-4-4-12, stored lowercase): its URL, server name and "
            "CLI argument. Never change it.",
        },
        "name": {"type": "string", "minLength": 1, "description": "Its name."},
        "version": {"type": "string", "description": "X.Y.Z: what `projects publish` publishes by default."},
        "description": {"type": "string", "description": "Shown on its page."},
        "entrypoints": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/entrypoint"}},
        "relatedProjects": {
            "type": "array",
            "items": {"$ref": "#/$defs/relatedProject"},
            "description": "Projects this one may call; aliases and ids unique.",
        },
        "configuration": {
            "type": "object",
            "description": "The configuration fields of the project.",
            "properties": {
                "fields": {"type": "array", "maxItems": MAX_FIELDS, "items": {"$ref": "#/$defs/configField"}}
            },
        },
    },
    "$defs": {
        "entrypoint": ENTRYPOINT,
        "param": PARAM,
        "configField": CONFIG_FIELD,
        "relatedProject": RELATED,
    },
}
