"""Which elicitation forms from external servers the host will show.

Supported: a flat object whose properties are strings (optionally date, date-time, email
or uri), numbers/integers (with bounds), booleans, single-select enums (`enum`, or
`oneOf` of titled consts) and string multi-select enums (`items.enum`, or `items.anyOf`
of titled consts). Anything else is refused with the reason, never half-rendered; so
are remote references and fields declared sensitive: secrets never go through forms."""

from __future__ import annotations

from typing import Any

STRING_FORMATS = frozenset({"date", "date-time", "email", "uri"})
SENSITIVE_FORMATS = frozenset({"password"})


def _titled_consts(options: Any) -> bool:
    return (
        isinstance(options, list)
        and bool(options)
        and all(isinstance(o, dict) and "const" in o and set(o) <= {"const", "title"} for o in options)
    )


def _refs(value: Any) -> bool:
    if isinstance(value, dict):
        return "$ref" in value or "$dynamicRef" in value or any(_refs(v) for v in value.values())
    if isinstance(value, list):
        return any(_refs(v) for v in value)
    return False


def _property_problem(name: str, prop: Any) -> str | None:
    if not isinstance(prop, dict):
        return f"field {name!r} has no schema"
    if (
        prop.get("writeOnly")
        or prop.get("sensitive")
        or prop.get("x-sensitive")
        or prop.get("format") in (SENSITIVE_FORMATS)
    ):
        return f"field {name!r} is declared sensitive; secrets are never entered through MCP forms"
    kind = prop.get("type")
    if kind == "string":
        if "format" in prop and prop["format"] not in STRING_FORMATS:
            return f"field {name!r} has unsupported format {prop['format']!r}"
        if "oneOf" in prop and not _titled_consts(prop["oneOf"]):
            return f"field {name!r}: oneOf must list titled constants"
        if "enum" in prop and not all(isinstance(v, str) for v in prop["enum"]):
            return f"field {name!r}: enum values must be strings"
        return None
    if kind in ("number", "integer", "boolean"):
        return None
    if kind == "array":
        items = prop.get("items")
        if not isinstance(items, dict):
            return f"field {name!r}: a multi-select needs items"
        if items.get("type") == "string" and isinstance(items.get("enum"), list):
            return (
                None
                if all(isinstance(v, str) for v in items["enum"])
                else f"field {name!r}: enum values must be strings"
            )
        if _titled_consts(items.get("anyOf")) and all(isinstance(o["const"], str) for o in items["anyOf"]):
            return None
        return f"field {name!r}: only string multi-select enums are supported"
    return f"field {name!r} has unsupported type {kind!r}"


def unsupported_reasons(schema: Any) -> list[str]:
    """Empty when the host can show this form; otherwise why not."""
    if not isinstance(schema, dict):
        return ["the requested schema is not an object"]
    if _refs(schema):
        return ["the form uses references ($ref), which are not supported"]
    if schema.get("type", "object") != "object":
        return ["the requested schema must be an object of fields"]
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        return ["the requested schema has no fields"]
    reasons = [p for name, prop in props.items() if (p := _property_problem(str(name), prop))]
    required = schema.get("required") or []
    if not isinstance(required, list) or any(r not in props for r in required):
        reasons.append("required names a field that does not exist")
    return reasons
