"""`package.json` as a JSON Schema: its parts generated from the models the loader reads them
with (`Entrypoint`, `Param`, `ConfigField`, `RelatedRef`: each field declares its type,
pattern, allowed values and description where it is checked), the top level written here.
The docs site's reference page is generated from it (`docs/generate.py`), and
`tests/workflows/test_package_schema.py` holds it to the loader: every key the loader reads
is here, and every project the loader accepts in the repository fits it.

The loader stays the judge: it checks what a schema cannot say (a handler file that exists
inside the project, a default that is one of its options, a relation both sides name), and
it ignores fields it does not know, so the schema allows them too."""

from __future__ import annotations

from typing import Any, Final

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from webui.workflows.configuration import MAX_FIELDS, ConfigField
from webui.workflows.entrypoint import Entrypoint
from webui.workflows.package_json import UUID_RE, Check, anchored, json_fields
from webui.workflows.params import Param
from webui.workflows.project import WORKFLOW_PROJECT_TYPE
from webui.workflows.related import RelatedRef

# Each part under the name the reference gives it.
_PARTS: Final[dict[str, type]] = {
    "entrypoint": Entrypoint,
    "param": Param,
    "configField": ConfigField,
    "relatedProject": RelatedRef,
}


class _Reference(GenerateJsonSchema):
    """pydantic's JSON Schema as the reference shows it: no titles and no defaults (each
    description says its default); null counts as absent, so a nullable field is its type."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


def _required(model: type) -> list[str]:
    """The fields whose check says `is required` (their JSON names)."""
    return [
        key
        for key, info in json_fields(model).items()
        if any(isinstance(m, Check) and m.required is not None for m in info.metadata)
    ]


def _renamed(node: Any, names: dict[str, str]) -> Any:
    """`node` with each `$ref` to a part by its class name made a reference by its own name, and
    each description (a field's docstring) on one line."""
    if isinstance(node, str):
        return " ".join(node.split())
    if isinstance(node, dict):
        return {
            k: (_ref(v, names) if k == "$ref" else v if k == "pattern" else _renamed(v, names))
            for k, v in node.items()  # pyright: ignore[reportUnknownVariableType]
        }
    if isinstance(node, list):
        return [_renamed(v, names) for v in node]  # pyright: ignore[reportUnknownVariableType]
    return node


def _ref(ref: str, names: dict[str, str]) -> str:
    return "#/$defs/" + names.get(ref.rsplit("/", 1)[1], ref.rsplit("/", 1)[1])


def _parts() -> dict[str, Any]:
    """The `$defs` of the schema: each part's JSON Schema, generated from its model."""
    _, generated = TypeAdapter.json_schemas(
        [(name, "validation", TypeAdapter(model)) for name, model in _PARTS.items()],
        schema_generator=_Reference,
    )
    names = {model.__name__: name for name, model in _PARTS.items()}
    by_class = _renamed(generated["$defs"], names)
    parts: dict[str, Any] = {}
    for name, model in _PARTS.items():
        part = {k: v for k, v in by_class[model.__name__].items() if k != "title"}
        parts[name] = {"type": "object", "description": part.pop("description"), "required": _required(model)}
        parts[name] |= part
    return parts


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
            "pattern": anchored(UUID_RE),
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
    "$defs": _parts(),
}
