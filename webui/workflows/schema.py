"""JSON Schemas derived from workflow params.

Three consumers, three shapes:
- `input_schema`: the MCP tool `inputSchema`, full JSON Schema 2020-12, closed objects;
- `elicitation_schema`: the much smaller subset MCP form elicitation allows (flat primitives,
  string-only enums);
- `form_blockers` / `field_summary`: when a form does not fit that subset, the tool answers
  `interaction_required` with a summary instead of eliciting.
Arguments are validated here once, with formats checked, so handlers only see valid input.

An entrypoint may instead give its own `inputSchema` (`webui/workflows/json_schema.py`
checks it at load): it is served as written and validated the same way.

Integers: a value of an `integer` property is valid when JSON Schema says so, which
includes `2.0` (a number with no fraction: many clients cannot tell 2 from 2.0); such a
value reaches the handler as the Python int `2`. `true` is never an integer. An integer is
within ±(2^53-1), JSON's safe range, unless the schema's own minimum/maximum allow more;
`1e308` is not one (`webui/validation.py`).

Arguments are checked by `webui/validation.py` (RE2 for patterns, bounded in size and time);
from async code through `check_arguments`, which runs the check in the checks' own threads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

from jsonschema.exceptions import ValidationError

from webui.errors import InvalidArguments
from webui.validation import CheckRefused, SchemaUnusable, problems, run_check
from webui.workflows.json_schema import X_MCP_HEADER
from webui.workflows.params import Option, Param

FileMode = Literal["local", "server"]

_SCALAR_TYPES: Final = {
    "string": "string",
    "positional": "string",
    "checkboxes": "string",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
}
_MAX_MESSAGE: Final = 200
_MAX_VALUE: Final = 80  # characters of a quoted value in a message
_MAX_LISTED: Final = 10  # problems named in one message; the rest counted

_LOCAL_FILE_HINT: Final = "Absolute path to a local file"
_LOCAL_FILES_HINT: Final = "Absolute paths to local files"
_SERVER_FILE_HINT: Final = (
    'An uploaded file of this project, as {"id": "wf_..."} (upload with POST .../files)'
)
_SERVER_FILES_HINT: Final = (
    'Uploaded files of this project, each as {"id": "wf_..."} (upload with POST .../files)'
)


# --------------------------------------------------------------------------- input schema


def _option_titles_needed(options: Sequence[Option]) -> bool:
    """Titled choices only when some option has a label; otherwise a plain enum is clearer."""
    return any(o.label is not None for o in options)


def _file_item_schema(file_mode: FileMode) -> dict[str, Any]:
    """Local runs take a path the host imports; server runs take an uploaded file's id only."""
    if file_mode == "local":
        return {"type": "string"}
    return {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "required": ["id"],
        "additionalProperties": False,
    }


def _item_schema(param: Param, file_mode: FileMode) -> dict[str, Any]:
    """Schema of one value (the whole value, or one array element for multiple params)."""
    if param.type == "file":
        return _file_item_schema(file_mode)
    schema: dict[str, Any] = {"type": _SCALAR_TYPES[param.type]}
    if param.format is not None:
        schema["format"] = param.format
    return schema


def _file_description(param: Param, file_mode: FileMode) -> str:
    """File params always explain what to send, since a model cannot guess path vs id."""
    if file_mode == "local":
        hint = _LOCAL_FILES_HINT if param.multiple else _LOCAL_FILE_HINT
    else:
        hint = _SERVER_FILES_HINT if param.multiple else _SERVER_FILE_HINT
    return f"{param.description} ({hint})" if param.description else hint


def _param_input_schema(param: Param, file_mode: FileMode) -> dict[str, Any]:
    """One property of the tool input schema."""
    item = _item_schema(param, file_mode)
    if param.options:
        if _option_titles_needed(param.options):
            key = "anyOf" if param.multiple else "oneOf"
            item[key] = [{"const": o.value, "title": o.title} for o in param.options]
        else:
            item["enum"] = [o.value for o in param.options]
    schema: dict[str, Any] = {"type": "array", "items": item} if param.multiple else item
    if param.title is not None:
        schema["title"] = param.title
    if param.type == "file":
        schema["description"] = _file_description(param, file_mode)
    elif param.description is not None:
        schema["description"] = param.description
    if param.has_default:
        schema["default"] = param.default
    if param.header is not None:
        schema[X_MCP_HEADER] = param.header
    return schema


def input_schema(params: Sequence[Param], *, file_mode: FileMode) -> dict[str, Any]:
    """The MCP tool `inputSchema`: a closed object, one property per param."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {p.name: _param_input_schema(p, file_mode) for p in params},
    }
    required = [p.name for p in params if p.required]
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def tool_input_schema(params: Sequence[Param], custom: str | None, *, file_mode: FileMode) -> dict[str, Any]:
    """An entrypoint's tool `inputSchema`: its own (`custom`, the JSON text of its checked
    `inputSchema`, a fresh copy each time) or the one its params make."""
    if custom is not None:
        schema: dict[str, Any] = json.loads(custom)
        return schema
    return input_schema(params, file_mode=file_mode)


# --------------------------------------------------------------------------- validation


def _path(error: ValidationError) -> str:
    """`limit`, `tags[1]`, `document.id`: where in the arguments the problem is."""
    text = ""
    for part in error.absolute_path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _short(text: str) -> str:
    """Keep one error readable even when the offending value is huge."""
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _message(error: ValidationError) -> str:
    """jsonschema's message, but naming the allowed values for titled choices.

    `oneOf`/`anyOf` of consts would otherwise read "is not valid under any of the given
    schemas", which tells nobody what to send.
    """
    subschemas = error.validator_value
    if error.validator in ("oneOf", "anyOf") and isinstance(subschemas, list):
        consts = [s["const"] for s in subschemas if isinstance(s, dict) and "const" in s]
        if consts and len(consts) == len(subschemas):
            return f"{error.instance!r} is not one of {consts!r}"
    if error.validator == "required":
        return error.message + _expected(error)
    return _value_shortened(error)


def _value_shortened(error: ValidationError) -> str:
    """jsonschema's message with the value it quotes cut to `_MAX_VALUE` characters, so that
    what the value should have been (`is not of type 'integer'`) survives a huge value."""
    quoted = repr(error.instance)
    if len(quoted) <= _MAX_VALUE or quoted not in error.message:
        return error.message
    return error.message.replace(quoted, quoted[: _MAX_VALUE - 3] + "...", 1)


def _expected(error: ValidationError) -> str:
    """` (type: string)`: what a missing required property takes, where its schema says a
    type; else nothing (a `$ref`, a schema without `type`)."""
    properties = error.schema.get("properties") if isinstance(error.schema, dict) else None
    names = error.validator_value if isinstance(error.validator_value, list) else []
    for name in names:
        if isinstance(name, str) and error.message == f"{name!r} is a required property":
            prop = properties.get(name) if isinstance(properties, dict) else None
            kind = prop.get("type") if isinstance(prop, dict) else None
            if isinstance(kind, str):
                return f" (type: {kind})"
            if isinstance(kind, list) and all(isinstance(k, str) for k in kind):
                return f" (type: {' or '.join(kind)})"
    return ""


def _describe(errors: Iterable[ValidationError]) -> list[str]:
    """One `path: message` entry per problem, in a stable order: by where (array items by
    index: `xs[2]` before `xs[10]`), a missing property first where."""
    lines: list[tuple[tuple[tuple[int, int, str], ...], int, str]] = []
    for error in errors:
        path = _short(_path(error))
        message = _short(_message(error))
        # Missing required params first: usually the most useful thing to fix.
        rank = 0 if error.validator == "required" else 1
        where = tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path)
        lines.append((where, rank, f"{path}: {message}" if path else message))
    lines.sort(key=lambda entry: entry[:2])
    seen: list[str] = []
    for _, _, line in lines:
        if line not in seen:
            seen.append(line)
    return seen


def _non_finite(value: Any, path: str = "") -> Iterable[str]:
    """Where NaN or ±Infinity hides in the arguments. JSON has neither, but Python's (and
    pydantic's) parsers accept `NaN`/`Infinity` literals and overflow `1e999` to infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{path}[{index}]")


def validate_arguments(
    schema: dict[str, Any], arguments: dict[str, Any] | None, *, tool: str
) -> dict[str, Any]:
    """Check tool arguments against the tool's input schema, or raise `InvalidArguments`.

    Defaults are not injected: the handler receives what the caller sent, and the schema
    already advertises the defaults.
    """
    args: Any = {} if arguments is None else arguments
    if not isinstance(args, dict):
        raise InvalidArguments(f"Invalid arguments for tool {tool!r}: arguments must be an object")
    bad = list(_non_finite(args))
    if bad:
        where = "; ".join(
            f"{path}: numbers must be finite (NaN, Infinity and values past ±1.8e308 are not JSON numbers)"
            for path in bad[:5]
        )
        raise InvalidArguments(f"Invalid arguments for tool {tool!r}: {where}")
    try:
        found = _describe(problems(schema, args))
    except CheckRefused as exc:
        raise InvalidArguments(f"Invalid arguments for tool {tool!r}: {exc}") from None
    except SchemaUnusable as exc:
        raise InvalidArguments(
            f"Invalid arguments for tool {tool!r}: the tool's input schema: {exc}"
        ) from None
    if found:
        listed = found[:_MAX_LISTED]
        if len(found) > len(listed):
            listed.append(f"and {len(found) - len(listed)} more")
        raise InvalidArguments(f"Invalid arguments for tool {tool!r}: " + "; ".join(listed))
    return _integral(schema, args)


async def check_arguments(
    schema: dict[str, Any], arguments: dict[str, Any] | None, *, tool: str, account: int | None
) -> dict[str, Any]:
    """`validate_arguments` from async code: in the checks' own threads (within `account`'s
    share of them), never on the event loop nor in a database thread."""
    return await run_check(account, validate_arguments, schema, arguments, tool=tool)


def _is_integer_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "integer"


def _as_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _integral(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The checked arguments, `2.0` given to a top-level integer property (or to an array of
    integers) as the int `2`."""
    properties = schema.get("properties")
    out = dict(args)
    if not isinstance(properties, dict):
        return out
    for name, value in args.items():
        prop = properties.get(name)
        if _is_integer_schema(prop):
            out[name] = _as_int(value)
        elif isinstance(prop, dict) and isinstance(value, list) and _is_integer_schema(prop.get("items")):
            out[name] = [_as_int(v) for v in value]
    return out


# --------------------------------------------------------------------------- elicitation


def _is_string_choice(param: Param) -> bool:
    """MCP multi-select forms only carry string enums."""
    return bool(param.options) and all(isinstance(o.value, str) for o in param.options)


def form_blockers(params: Sequence[Param]) -> list[str]:
    """Why this form cannot go through standard MCP elicitation; empty = it can.

    Elicitation forms are flat primitives: no files, and arrays only as multi-selects over
    static string options.
    """
    reasons: list[str] = []
    for param in params:
        if param.type == "file":
            reasons.append(f"{param.name!r} is a file field")
        elif param.multiple and not param.options:
            reasons.append(f"{param.name!r} is a multi-value field without static options")
        elif param.multiple and not _is_string_choice(param):
            reasons.append(f"{param.name!r} is a multi-value field whose options are not strings")
    return reasons


def _elicitation_property(param: Param) -> dict[str, Any]:
    """One MCP `PrimitiveSchemaDefinition`, or a string placeholder for unrepresentable fields."""
    schema: dict[str, Any]
    if param.type == "file" or (param.multiple and not _is_string_choice(param)):
        schema = {"type": "string"}
    elif param.multiple:
        if _option_titles_needed(param.options):
            items: dict[str, Any] = {"anyOf": [{"const": o.value, "title": o.title} for o in param.options]}
        else:
            items = {"type": "string", "enum": [o.value for o in param.options]}
        schema = {"type": "array", "items": items}
    else:
        schema = {"type": _SCALAR_TYPES[param.type]}
        if param.format is not None:
            schema["format"] = param.format
        if param.options:
            if schema["type"] == "string" and _option_titles_needed(param.options):
                schema["oneOf"] = [{"const": o.value, "title": o.title} for o in param.options]
            else:
                schema["enum"] = [o.value for o in param.options]
    schema["title"] = param.title or param.name
    if param.description is not None:
        schema["description"] = param.description
    if param.has_default and param.type != "file" and not form_blockers([param]):
        schema["default"] = param.default
    return schema


def elicitation_schema(params: Sequence[Param]) -> dict[str, Any]:
    """The `requestedSchema` of an MCP form elicitation for `ctx.ask` fields.

    Callers check `form_blockers` first; unrepresentable fields still get a string
    placeholder so this never fails on a form it was handed by mistake.
    """
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {p.name: _elicitation_property(p) for p in params},
    }
    required = [p.name for p in params if p.required]
    if required:
        schema["required"] = required
    return schema


def question_schema(params: Sequence[Param]) -> dict[str, Any]:
    """The stored schema of a `ctx.ask` question: the elicitation form, except that file
    fields (never elicited: they are form blockers) ask for uploaded files of the project,
    `{"id": "wf_..."}` or a list of them, as a tool's server-mode file params do."""
    schema = elicitation_schema(params)
    for p in params:
        if p.type == "file":
            prop = _param_input_schema(p, "server")
            prop["title"] = p.title or p.name
            prop.pop("default", None)
            schema["properties"][p.name] = prop
    return schema


def field_summary(params: Sequence[Param]) -> list[dict[str, Any]]:
    """The `fields` of an `interaction_required` result: enough to know what is asked."""
    return [
        {"name": p.name, "type": p.type, "required": p.required, "title": p.title or p.name} for p in params
    ]


def schema_field_summary(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """`field_summary` of a question asked with a JSON Schema (`check_ask_schema`'s)."""
    required = set(schema.get("required") or [])
    return [
        {
            "name": name,
            "type": str(prop.get("type")),
            "required": name in required,
            "title": str(prop.get("title") or name),
        }
        for name, prop in (schema.get("properties") or {}).items()
    ]
