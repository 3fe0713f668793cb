"""Which JSON Schemas from external servers the host shows as forms (webui.web.forms).

One check, two policies. Both need a flat object without references ($ref), each
property with a schema and a name that is a safe identifier (`SAFE_NAME`: letters, digits,
`_`, `-` and `.`, starting with a letter or `_`, at most 64 characters). A name is the
server's text: a field named otherwise is refused, and the refusal names it.

- An elicitation request (`unsupported_reasons`) is the MCP form subset: properties that
  are strings (optionally date, date-time, email or uri), numbers/integers (with bounds),
  booleans, single-select enums (`enum`, or `oneOf` of titled consts) and string
  multi-select enums (`items.enum`, or `items.anyOf` of titled consts). Anything else is
  refused with the reason, never half-rendered; so are fields declared sensitive: secrets
  never go through forms, and so is a form whose answers the host cannot check
  (`webui/validation.py` `usable`: a pattern RE2 cannot run, such as a lookaround, a
  reference loop, a schema past the size bounds) — the server is told the form was refused.
- A tool's input schema (`tool_form_problem`) may be any flat object of scalars (with
  `oneOf`/`anyOf` of consts as choices) and lists of non-boolean scalars; otherwise the
  page offers a JSON text area instead of generated fields, saying why. Its arguments are
  checked before the call where the host can check them (`field_errors`); where it cannot,
  the server judges them itself.

A schema is walked at most `MAX_WALK` values deep into (a server's schema may be any size):
past that it is refused as too large. `unsupported_reasons` compiles patterns: call it
through `run_check`, off the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webui.validation import MAX_SCHEMA_NODES, SchemaUnusable, usable

SCALAR_TYPES = frozenset({"string", "number", "integer", "boolean"})
STRING_FORMATS = frozenset({"date", "date-time", "email", "uri"})
SENSITIVE_FORMATS = frozenset({"password"})
SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
SHOWN_NAME_CHARS = 200  # a refused name is quoted up to this length in the reason
MAX_WALK = MAX_SCHEMA_NODES


def _shown(name: str) -> str:
    """A field's name as a refusal quotes it: repr'd, clipped when it is very long."""
    return repr(name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "…")


def name_problem(name: Any) -> str | None:
    """Why `name` cannot name a form field (None: it can)."""
    if isinstance(name, str) and SAFE_NAME.fullmatch(name):
        return None
    return (
        f"field {_shown(str(name))} was refused: its name is not a safe identifier (letters, digits,"
        " '_', '-' and '.', starting with a letter or '_', at most 64 characters)"
    )


def _titled_consts(options: Any) -> bool:
    return (
        isinstance(options, list)
        and bool(options)
        and all(isinstance(o, dict) and "const" in o and set(o) <= {"const", "title"} for o in options)
    )


class _TooLarge(Exception):
    """A schema with more than MAX_WALK values."""


def _refs(value: Any) -> bool:
    """Whether a reference hides anywhere in `value` (iteratively; _TooLarge past MAX_WALK)."""
    stack, seen = [value], 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "$ref" in node or "$dynamicRef" in node:
                return True
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        seen += len(children)
        if seen > MAX_WALK:
            raise _TooLarge
        stack.extend(children)
    return False


def _elicitation_field_problem(name: str, prop: dict[str, Any]) -> str | None:
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


def _tool_field_problem(name: str, prop: dict[str, Any]) -> str | None:
    kind = prop.get("type")
    if kind in SCALAR_TYPES:
        for key in ("oneOf", "anyOf"):
            options = prop.get(key)
            if options is not None and not (
                isinstance(options, list) and all(isinstance(o, dict) and "const" in o for o in options)
            ):
                return f"field {name!r} combines schemas ({key})"
        return None
    if kind == "array":
        items = prop.get("items")
        if isinstance(items, dict) and (items.get("type") in SCALAR_TYPES - {"boolean"}):
            return None
        return f"field {name!r} is a list of {_kind_of(items)}"
    return f"field {name!r} has type {kind!r}" if kind else f"field {name!r} has no single type"


def _kind_of(items: Any) -> str:
    if isinstance(items, dict) and isinstance(items.get("type"), str):
        return f"{items['type']}s"
    return "values without a single type"


@dataclass(frozen=True)
class FormPolicy:
    """What one kind of form accepts, and how its refusals read."""

    not_an_object: str
    uses_refs: str
    not_fields: str
    bad_properties: str
    field_problem: Callable[[str, dict[str, Any]], str | None]
    check_required: bool


ELICITATION = FormPolicy(
    not_an_object="the requested schema is not an object",
    uses_refs="the form uses references ($ref), which are not supported",
    not_fields="the requested schema must be an object of fields",
    bad_properties="the requested schema has no fields",
    field_problem=_elicitation_field_problem,
    check_required=True,
)
TOOL_INPUT = FormPolicy(
    not_an_object="the tool has no input schema object",
    uses_refs="the input schema uses references ($ref)",
    not_fields="the input schema is not an object of fields",
    bad_properties="the input schema's properties are not an object",
    field_problem=_tool_field_problem,
    check_required=False,
)


def form_problems(schema: Any, policy: FormPolicy) -> list[str]:
    """Empty when `schema` can be shown as a form under `policy`; otherwise why not (the
    schema-wide problem, or one per field that does not fit)."""
    if not isinstance(schema, dict):
        return [policy.not_an_object]
    try:
        if _refs(schema):
            return [policy.uses_refs]
    except _TooLarge:
        return [f"the schema is too large (more than {MAX_WALK} values)"]
    if schema.get("type", "object") != "object":
        return [policy.not_fields]
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        return [policy.bad_properties]
    reasons: list[str] = []
    for name, prop in props.items():
        if bad_name := name_problem(name):
            reasons.append(bad_name)
        elif not isinstance(prop, dict):
            reasons.append(f"field {str(name)!r} has no schema")
        elif problem := policy.field_problem(str(name), prop):
            reasons.append(problem)
    if policy.check_required:
        required = schema.get("required") or []
        if not isinstance(required, list) or any(r not in props for r in required):
            reasons.append("required names a field that does not exist")
    return reasons


def unsupported_reasons(schema: Any) -> list[str]:
    """Empty when the host can show this elicitation form and check its answers; otherwise
    why not. Compiles the form's patterns: run it through `run_check`."""
    reasons = form_problems(schema, ELICITATION)
    if reasons:
        return reasons
    try:
        usable(schema)
    except SchemaUnusable as exc:
        return [f"the host cannot check answers to this form: {exc}"]
    return []


def tool_form_problem(schema: Any) -> str | None:
    """Why a tool's inputSchema gets a JSON text area instead of generated fields."""
    return next(iter(form_problems(schema, TOOL_INPUT)), None)
