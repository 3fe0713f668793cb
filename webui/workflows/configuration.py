"""Configuration fields: what `package.json` declares under `configuration.fields[]`, and
checking a configuration's values against them.

Any project with a `package.json` id may declare fields (workflow, conversation, kanban);
only workflows run, so only they ever read a configuration. Field types: string, number,
boolean, select (one static option), multiselect (a list of static options), date
(`YYYY-MM-DD`) and secret (a string that is write-only once stored). This module is pure:
it reads files and checks values; the stored configurations live in `webui/configs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from webui.errors import ProjectError
from webui.workflows.package_json import (
    is_number,
    json_type,
    optional_bool,
    optional_str,
    parse_id,
    parse_named,
    quote,
    read_package_json,
)
from webui.workflows.params import FORMAT_CHECKER, NAME_RE, Option

FIELD_TYPES: Final = ("string", "number", "boolean", "select", "multiselect", "date", "secret")
MAX_FIELDS: Final = 200
MAX_STRING_VALUE: Final = 64 * 1024


@dataclass(frozen=True)
class ConfigField:
    """One declared configuration field."""

    name: str
    type: str
    required: bool = False
    default: Any = None
    has_default: bool = False
    description: str | None = None
    options: tuple[Option, ...] = ()

    @property
    def secret(self) -> bool:
        return self.type == "secret"

    def declaration(self) -> dict[str, Any]:
        """The field as plain JSON (what the digest covers and what pages and the API show)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "description": self.description,
            "options": [{"value": o.value, "label": o.label} for o in self.options],
        }
        if self.has_default:
            doc["default"] = self.default
        return doc


def parse_config_fields(data: dict[str, Any], where: str) -> tuple[ConfigField, ...]:
    """`configuration.fields` of a parsed package.json (absent: no fields)."""
    section = data.get("configuration")
    if section is None:
        return ()
    if not isinstance(section, dict):
        raise ProjectError(f"{where}: configuration: expected an object, got {json_type(section)}")
    raw = section.get("fields")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: configuration.fields: expected a list, got {json_type(raw)}")
    if len(raw) > MAX_FIELDS:
        raise ProjectError(f"{where}: configuration.fields: at most {MAX_FIELDS} fields, got {len(raw)}")
    return parse_named(raw, f"{where}: configuration.fields", _parse_field, "field")


def _parse_field(raw: Any, where: str) -> ConfigField:
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected a field object, got {json_type(raw)}")
    name = raw.get("name")
    if name is None:
        raise ProjectError(f"{where}.name: is required")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or len(name) > 64:
        raise ProjectError(
            f"{where}.name: invalid field name {quote(name)} "
            "(letters, digits and '_', not starting with a digit, at most 64)"
        )
    ftype = raw.get("type")
    if ftype not in FIELD_TYPES:
        shown = "is required" if ftype is None else f"unknown field type {quote(ftype)}"
        raise ProjectError(f"{where}.type: {shown} (expected one of: {', '.join(FIELD_TYPES)})")
    required = optional_bool(raw, "required", where)
    description = optional_str(raw, "description", where)
    options = _parse_field_options(raw.get("options"), ftype, f"{where}.options")
    has_default = raw.get("default") is not None
    default = raw.get("default")
    if has_default:
        if ftype == "secret":
            raise ProjectError(f"{where}.default: a secret field cannot have a default")
        field = ConfigField(name=name, type=ftype, options=options)
        problem = value_problem(field, default)
        if problem:
            raise ProjectError(f"{where}.default: {problem}")
    return ConfigField(
        name=name,
        type=ftype,
        required=required,
        default=default,
        has_default=has_default,
        description=description,
        options=options,
    )


def _parse_field_options(raw: Any, ftype: str, where: str) -> tuple[Option, ...]:
    if ftype not in ("select", "multiselect"):
        if raw not in (None, []):
            raise ProjectError(f"{where}: only select and multiselect fields have options")
        return ()
    if not isinstance(raw, list) or not raw:
        raise ProjectError(f"{where}: a {ftype} field needs a non-empty list of options")
    options: list[Option] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        label: str | None = None
        if isinstance(item, dict):
            value = item.get("value")
            label = optional_str(item, "label", item_where)
            item_where += ".value"
        else:
            value = item
        if not isinstance(value, str) or not value:
            raise ProjectError(f"{item_where}: expected a non-empty string option, got {quote(value)}")
        if value in seen:
            raise ProjectError(f"{item_where}: duplicate option {quote(value)}")
        seen.add(value)
        options.append(Option(value=value, label=label))
    return tuple(options)


def value_problem(field: ConfigField, value: Any) -> str | None:
    """Why `value` is not a valid value of `field`, or None."""
    ftype = field.type
    if ftype in ("string", "secret"):
        if not isinstance(value, str):
            return f"expected a string, got {json_type(value)}"
        if len(value) > MAX_STRING_VALUE:
            return f"at most {MAX_STRING_VALUE} characters"
        return None
    if ftype == "number":
        return None if is_number(value) else f"expected a number, got {json_type(value)}"
    if ftype == "boolean":
        return None if isinstance(value, bool) else f"expected true or false, got {json_type(value)}"
    if ftype == "date":
        if not isinstance(value, str) or not FORMAT_CHECKER.conforms(value, "date"):
            return f"expected a date (YYYY-MM-DD), got {quote(value)}"
        return None
    allowed = [str(o.value) for o in field.options]
    if ftype == "select":
        if value not in allowed or not isinstance(value, str):
            return f"{quote(value)} is not one of the options ({', '.join(allowed)})"
        return None
    # multiselect
    if not isinstance(value, list):
        return f"expected a list of options, got {json_type(value)}"
    for item in value:
        if not isinstance(item, str) or item not in allowed:
            return f"{quote(item)} is not one of the options ({', '.join(allowed)})"
    if len(set(value)) != len(value):
        return "an option is chosen twice"
    return None


def value_problems(fields: tuple[ConfigField, ...], values: dict[str, Any]) -> dict[str, str]:
    """Every problem of a configuration's stored values against today's fields, by field name:
    unknown fields, wrong types, and required fields with neither a value nor a default."""
    by_name = {f.name: f for f in fields}
    problems: dict[str, str] = {}
    for name, value in values.items():
        field = by_name.get(name)
        if field is None:
            problems[name] = "unknown field (not declared in package.json configuration.fields)"
            continue
        problem = value_problem(field, value)
        if problem:
            problems[name] = problem
    for field in fields:
        if field.required and field.name not in values and not field.has_default:
            problems[field.name] = "is required"
    return problems


def effective_values(fields: tuple[ConfigField, ...], values: dict[str, Any]) -> dict[str, Any]:
    """What a run sees: every declared field, its stored value or else its default (or None)."""
    return {f.name: values.get(f.name, f.default if f.has_default else None) for f in fields}


def fields_digest(fields: tuple[ConfigField, ...]) -> str:
    """A digest of the declaration, so an export names which fields its values were made for."""
    text = json.dumps([f.declaration() for f in fields], sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def load_config_fields(root: Path | str) -> tuple[str, tuple[ConfigField, ...]]:
    """The project id and configuration fields of any project folder with a package.json id
    (workflow, conversation or kanban)."""
    path, data = read_package_json(Path(root).resolve())
    where = str(path)
    return parse_id(data.get("id"), where), parse_config_fields(data, where)
