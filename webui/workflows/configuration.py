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
from pathlib import Path
from typing import Annotated, Any, Final, cast

from pydantic import BeforeValidator, FailFast, TypeAdapter, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass

from webui.errors import ProjectError
from webui.workflows.package_json import (
    ABSENT,
    Flag,
    Text,
    a_dict,
    anchored,
    check,
    described,
    is_number,
    json_type,
    listed,
    one_of,
    parse_id,
    problem,
    quote,
    read_package_json,
    unique_names,
    validated,
)
from webui.workflows.params import FORMAT_CHECKER, NAME_RE, Option, Options, option_items

FIELD_TYPES: Final = ("string", "number", "boolean", "select", "multiselect", "date", "secret")
MAX_FIELDS: Final = 200
MAX_STRING_VALUE: Final = 64 * 1024


def _field_name_ok(value: Any) -> bool:
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None and len(value) <= 64


@dataclass(
    frozen=True,
    config=described(
        "One configuration field: each person keeps named configurations of values for them, and a "
        "run reads the active one as `ctx.config`."
    ),
)
class ConfigField:
    """One declared configuration field (checked in reading order: the first problem is told)."""

    name: Annotated[
        str,
        check(
            _field_name_ok,
            lambda v: (
                f"invalid field name {quote(v)} "
                "(letters, digits and '_', not starting with a digit, at most 64)"
            ),
            {"type": "string", "pattern": anchored(NAME_RE), "maxLength": 64},
            required="",
        ),
    ] = ABSENT
    """Unique."""
    type: Annotated[
        str,
        one_of("field type", FIELD_TYPES),
    ] = ABSENT
    """`date` is `YYYY-MM-DD`; a `secret` is write-only once stored (encrypted at rest)."""
    required: Flag = False
    """A configuration must give it (or its default)."""
    description: Text = None
    """Shown on the configuration page."""
    options: Options = ()
    """`select` and `multiselect` only (non-empty strings)."""
    default: Any = None
    """A valid value (secrets have none)."""

    _object = a_dict("a field object")

    @property
    def secret(self) -> bool:
        return self.type == "secret"

    @property
    def has_default(self) -> bool:
        return self.default is not None

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, raw: Any, info: ValidationInfo) -> tuple[Option, ...]:
        ftype = info.data.get("type")
        if ftype is None:  # its type was refused: that is the problem told
            return ()
        if isinstance(raw, tuple) and raw:  # already options (the check of a default)
            return cast(tuple[Option, ...], raw)
        return _field_options(None if raw == () else raw, ftype)

    @field_validator("default")
    @classmethod
    def _default(cls, default: Any, info: ValidationInfo) -> Any:
        if default is None or "options" not in info.data:
            return default
        if info.data["type"] == "secret":
            raise problem("a secret field cannot have a default")
        declared = ConfigField(name="default", type=info.data["type"], options=info.data["options"])
        found = value_problem(declared, default)
        if found:
            raise problem(found)
        return default

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


def _field_options(raw: Any, ftype: str) -> tuple[Option, ...]:
    if ftype not in ("select", "multiselect"):
        if raw not in (None, []):
            raise problem("only select and multiselect fields have options")
        return ()
    if not isinstance(raw, list) or not raw:
        raise problem(f"a {ftype} field needs a non-empty list of options")
    return option_items(
        cast(list[Any], raw),
        lambda v: isinstance(v, str) and bool(v),
        lambda v: f"expected a non-empty string option, got {quote(v)}",
        value_required=False,
    )


def _at_most(raw: list[Any]) -> list[Any]:
    if len(raw) > MAX_FIELDS:
        raise problem(f"at most {MAX_FIELDS} fields, got {len(raw)}")
    return raw


_FIELDS: Final = TypeAdapter(
    Annotated[
        tuple[ConfigField, ...],
        FailFast(),
        unique_names("field"),
        BeforeValidator(_at_most),
        listed("a list"),
    ]
)


def parse_config_fields(data: dict[str, Any], where: str) -> tuple[ConfigField, ...]:
    """`configuration.fields` of a parsed package.json (absent: no fields)."""
    section = data.get("configuration")
    if section is None:
        return ()
    if not isinstance(section, dict):
        raise ProjectError(f"{where}: configuration: expected an object, got {json_type(section)}")
    return validated(_FIELDS, cast(dict[str, Any], section).get("fields"), f"{where}: configuration.fields")


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
    known = set(allowed)  # one lookup per chosen option: a long list stays linear
    if ftype == "select":
        if not isinstance(value, str) or value not in known:
            return f"{quote(value)} is not one of the options ({', '.join(allowed)})"
        return None
    # multiselect
    if not isinstance(value, list):
        return f"expected a list of options, got {json_type(value)}"
    for item in value:
        if not isinstance(item, str) or item not in known:
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
