"""JSON Schema (a flat object: MCP elicitation forms, tool input schemas) <-> HTML forms.

`fields()` describes each property for the `schema_form` macro; `parse()` turns submitted
form data back into typed JSON values and per-field errors. The services validate the
result again against the stored schema: this module only translates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData

FORMAT_INPUTS = {"date": "date", "date-time": "datetime-local", "email": "email", "uri": "url"}


@dataclass
class Choice:
    value: Any
    label: str


@dataclass
class Field:
    name: str
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
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        f = Field(
            name=name,
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
    if prop.get("format") == "date-time" and len(raw) == 16:  # datetime-local: minutes, no zone
        return f"{raw}:00Z"
    return raw


def parse(
    schema: dict[str, Any], form: FormData, *, prefix: str = ""
) -> tuple[dict[str, Any], dict[str, str]]:
    """Typed values for the schema's properties, and an error message per bad field."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    required = set(schema.get("required") or [])
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        key = prefix + name
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
            values[name] = {"id": raw} if kind == "object" else _coerce(prop, raw)
        except ValueError as exc:
            errors[name] = str(exc) if "option" in str(exc) else f"not a valid {kind or 'value'}"
    return values, errors
