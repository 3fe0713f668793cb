"""JSON Schema (a flat object: MCP elicitation forms, tool input schemas) <-> HTML forms.

`fields()` describes each property for the `schema_fields` macro; `parse()` turns submitted
form data back into typed JSON values and per-field errors. The services validate the
result again against the stored schema: this module only translates.

A property's name is data: it comes from whoever wrote the schema (an external MCP server,
a workflow). It is shown as escaped text only; the controls' ids and form names use
`Field.key` (`field_key`), which is the name only when the name is a plain identifier."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from starlette.datastructures import FormData

MAX_OFFSET_MINUTES = 18 * 60  # what ISO 8601 and Python allow; real zones stay within ±14 h
DATETIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([Zz]|[+-]\d{2}:\d{2})?")
KNOWN_MESSAGES = ("choose one of", "not a valid date-time", "not a valid time zone offset")
FORMAT_INPUTS = {"date": "date", "date-time": "datetime-local", "email": "email", "uri": "url"}
# What may appear as-is in an id, a `for`, an `aria-describedby` list and a form name.
SAFE_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def field_key(index: int, name: str) -> str:
    """The token the controls of property `name` (the `index`-th of its schema) use in HTML
    ids and form field names: the name itself when it is a plain identifier, otherwise its
    position and a digest of it, so no schema author's text is ever more than escaped data."""
    if SAFE_KEY_RE.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"field{index}-{digest}"


@dataclass
class Choice:
    value: Any
    label: str


@dataclass
class Field:
    name: str  # the property's name: data, never part of an id
    key: str  # its controls' ids and form names (`field_key`)
    label: str
    widget: str  # text | textarea | number | checkbox | select | multiselect | lines | file_id
    required: bool
    description: str | None = None
    input_type: str = "text"
    choices: list[Choice] = field(default_factory=list)
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    step: str | None = None


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _choices(schema: dict[str, Any]) -> list[Choice]:
    if "enum" in schema:
        names = schema.get("enumNames") or []
        return [Choice(v, str(names[i]) if i < len(names) else str(v)) for i, v in enumerate(schema["enum"])]
    for key in ("oneOf", "anyOf"):
        if key in schema and all(isinstance(o, dict) and "const" in o for o in schema[key]):
            return [Choice(o["const"], str(o.get("title", o["const"]))) for o in schema[key]]
    return []


def fields(schema: dict[str, Any]) -> list[Field]:
    required = set(schema.get("required") or [])
    out: list[Field] = []
    for index, (name, prop) in enumerate((schema.get("properties") or {}).items()):
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        f = Field(
            name=name,
            key=field_key(index, name),
            label=str(prop.get("title") or name),
            widget="text",
            required=name in required,
            description=prop.get("description"),
            default=prop.get("default"),
        )
        choices = _choices(prop)
        if kind == "array":
            items = _as_dict(prop.get("items"))
            item_choices = _choices(items)
            if item_choices:
                f.widget, f.choices = "multiselect", item_choices
            elif items.get("type") == "object":
                f.widget = "file_ids"
            else:
                f.widget = "lines"
        elif choices:
            f.widget, f.choices = "select", choices
        elif kind in ("number", "integer"):
            f.widget, f.input_type = "number", "number"
            f.minimum, f.maximum = prop.get("minimum"), prop.get("maximum")
            f.step = "1" if kind == "integer" else "any"
        elif kind == "boolean":
            f.widget = "checkbox"
        elif kind == "object":
            f.widget = "file_id"
        else:
            f.input_type = FORMAT_INPUTS.get(str(prop.get("format")), "text")
        out.append(f)
    return out


def _coerce(prop: dict[str, Any], raw: str) -> Any:
    kind = prop.get("type")
    choices = _choices(prop)
    if choices:
        for c in choices:
            if str(c.value) == raw:
                return c.value
        raise ValueError("choose one of the options")
    if kind == "integer":
        return int(raw)
    if kind == "number":
        number = float(raw)
        return int(number) if number.is_integer() and "." not in raw else number
    return raw


def offset_key(key: str) -> str:
    """The hidden field beside a `datetime-local` control that carries the browser's UTC
    offset at the chosen moment (filled by static/js/app.js)."""
    return f"tzoffset:{key}"


def local_to_utc(raw: str, offset_minutes: int | None) -> str:
    """A `datetime-local` value (`YYYY-MM-DDTHH:MM[:SS]`, the browser's wall clock) as a UTC
    instant `YYYY-MM-DDTHH:MM:SSZ`. `offset_minutes`: the browser's offset east of UTC at
    that moment (+330 in India, -300 in New York in winter); None (no script ran) takes the
    value as UTC. A value that already names its zone is only normalised to UTC."""
    if DATETIME_RE.fullmatch(raw) is None:
        raise ValueError("not a valid date-time")
    try:
        moment = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise ValueError("not a valid date-time") from None
    if moment.tzinfo is None:
        if offset_minutes is None:
            offset_minutes = 0
        if not -MAX_OFFSET_MINUTES <= offset_minutes <= MAX_OFFSET_MINUTES:
            raise ValueError("not a valid time zone offset")
        moment = moment.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _offset(form: FormData, key: str) -> int | None:
    raw = str(form.get(offset_key(key)) or "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError("not a valid time zone offset") from None


def parse(
    schema: dict[str, Any], form: FormData, *, prefix: str = ""
) -> tuple[dict[str, Any], dict[str, str]]:
    """Typed values for the schema's properties, and an error message per bad field."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    required = set(schema.get("required") or [])
    for index, (name, prop) in enumerate((schema.get("properties") or {}).items()):
        prop = prop if isinstance(prop, dict) else {}
        key = prefix + field_key(index, name)
        kind = prop.get("type")
        try:
            if kind == "boolean":
                values[name] = form.get(key) in ("on", "true", "1")
                continue
            if kind == "array":
                items = _as_dict(prop.get("items"))
                if _choices(items):
                    raw_list = [str(v) for v in form.getlist(key)]
                else:
                    raw_value = str(form.get(key) or "")
                    raw_list = [line.strip() for line in raw_value.splitlines() if line.strip()]
                if items.get("type") == "object":
                    values[name] = [{"id": v} for v in raw_list]
                elif raw_list or name in required:
                    values[name] = [_coerce(items, v) for v in raw_list]
                continue
            raw = str(form.get(key) or "").strip()
            if not raw:
                if name in required:
                    errors[name] = "required"
                continue
            if kind == "object":
                values[name] = {"id": raw}
            elif prop.get("format") == "date-time" and not _choices(prop):
                values[name] = local_to_utc(raw, _offset(form, key))
            else:
                values[name] = _coerce(prop, raw)
        except ValueError as exc:
            message = str(exc)
            errors[name] = message if message.startswith(KNOWN_MESSAGES) else f"not a valid {kind or 'value'}"
    return values, errors
