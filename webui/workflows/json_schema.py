"""JSON Schemas a project writes itself: an entrypoint's `inputSchema` (full JSON Schema
2020-12) and a question's schema (`ctx.ask(title, {...})`, the MCP elicitation subset).

Both are checked before anything uses them, so a served schema can neither fetch nor hang:
- bounded: at most `MAX_SCHEMA_BYTES` of JSON, `MAX_SCHEMA_DEPTH` levels, `MAX_SCHEMA_NODES`
  objects and arrays;
- local: every `$ref` points inside the schema (`#...`) and resolves there; `$id`,
  `$dynamicRef` and remote or relative references are refused (validators are also built
  with an empty registry, `webui/validation.py`, so nothing is ever retrieved);
- no `$ref` loop that comes back to a schema without going into the value (`{"$ref": "#"}`
  at the root, `#/$defs/a` → `#/$defs/b` → `#/$defs/a`): checking would never end;
- regular expressions (`pattern`, `patternProperties`) at most `MAX_PATTERN` characters and
  ones the linear-time engine (RE2) runs: no lookarounds, no backreferences
  (`webui/validation.py`, which also checks arguments with RE2, so no pattern can take
  more than linear time);
- valid: the 2020-12 metaschema (formats aside: patterns are compiled by RE2, never by
  Python's `re`), and usable as `webui/validation.py` uses schemas (`usable`).
Problems are one `ProjectError` line naming where (`<where>/properties/x/pattern: ...`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from webui import validation
from webui.errors import ProjectError
from webui.workflows.package_json import json_type, quote

DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
MAX_SCHEMA_BYTES: Final = 64 * 1024
MAX_SCHEMA_DEPTH: Final = 32
MAX_SCHEMA_NODES: Final = 4000
MAX_PATTERN: Final = 512
X_MCP_HEADER: Final = "x-mcp-header"
# What `x-mcp-header` may sit on (SEP-2243; `number` is not allowed by the spec).
HEADER_PROPERTY_TYPES: Final = frozenset({"string", "integer", "boolean"})
HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")
# Question property names: the same as params' (they become form controls and answer keys).
FIELD_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_FIELDS: Final = 100
ELICITATION_FORMATS: Final = ("email", "uri", "date", "date-time")


def _check_bounds(schema: Any, where: str) -> None:
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False).encode())
    except (ValueError, RecursionError):
        raise ProjectError(f"{where}: not a JSON document (too deep, or NaN/Infinity)") from None
    if size > MAX_SCHEMA_BYTES:
        raise ProjectError(f"{where}: the schema is {size} bytes of JSON, more than {MAX_SCHEMA_BYTES}")
    count = 0
    for path, node in validation.walk(schema):
        if isinstance(node, dict | list):
            count += 1
            if len(path) > MAX_SCHEMA_DEPTH:
                shown = validation.pointer(path[:8])
                raise ProjectError(f"{where}{shown}/...: nested more than {MAX_SCHEMA_DEPTH} levels")
            if count > MAX_SCHEMA_NODES:
                raise ProjectError(f"{where}: more than {MAX_SCHEMA_NODES} objects and arrays")


def _regex_problem(pattern: str) -> str | None:
    """Why this pattern is refused (too long, or not one RE2 runs in linear time)."""
    if len(pattern) > MAX_PATTERN:
        return f"a pattern of {len(pattern)} characters (at most {MAX_PATTERN})"
    return validation.pattern_problem(pattern)


def _check_patterns(schema: Any, where: str) -> None:
    for path, node in validation.walk(schema):
        if not isinstance(node, dict):
            continue
        patterns: list[tuple[tuple[str | int, ...], Any]] = []
        if "pattern" in node:
            patterns.append(((*path, "pattern"), node["pattern"]))
        if isinstance(node.get("patternProperties"), dict):
            patterns += [((*path, "patternProperties", k), k) for k in node["patternProperties"]]
        for at, pattern in patterns:
            if not isinstance(pattern, str):
                continue  # check_schema names the wrong type
            problem = _regex_problem(pattern)
            if problem:
                raise ProjectError(f"{where}{validation.pointer(at)}: refused: {problem}")


def _check_references(schema: dict[str, Any], where: str) -> None:
    """Only `#...` references, each resolving inside this document; no `$id` re-basing."""
    resolver = Registry().with_contents([("", schema)], default_specification=DRAFT202012).resolver("")
    for path, node in validation.walk(schema):
        if not isinstance(node, dict):
            continue
        at = f"{where}{validation.pointer(path)}"
        if "$schema" in node and path:
            raise ProjectError(f"{at}/$schema: only the root may name the dialect")
        for key in ("$id", "$dynamicRef", "$dynamicAnchor", "$recursiveRef"):
            if isinstance(node.get(key), str):
                raise ProjectError(
                    f'{at}/{key}: not supported (references stay inside the schema: "$ref": "#...")'
                )
        ref = node.get("$ref")
        if not isinstance(ref, str):
            continue
        if not ref.startswith("#"):
            raise ProjectError(
                f'{at}/$ref: {quote(ref)} is not local: only references inside the schema ("#/$defs/x",'
                ' "#anchor") are allowed, nothing is fetched'
            )
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise ProjectError(f"{at}/$ref: {quote(ref)} points to nothing in the schema") from None


def _check_valid(schema: dict[str, Any], where: str) -> None:
    """Valid 2020-12, checked without compiling its patterns (`_check_patterns` does, by RE2)."""
    try:
        validation.valid(schema)
    except validation.SchemaUnusable as exc:
        raise ProjectError(f"{where}{exc.where}: {exc.reason}") from None


def _check_usable(schema: dict[str, Any], where: str) -> None:
    """No `$ref` loop, and whatever else `webui/validation.py` needs to check arguments with it."""
    loop = validation.ref_loop(schema)
    if loop is not None:
        raise ProjectError(
            f"{where}{loop}: a reference loop: it comes back here without going into the value"
            " (checking arguments would never end)"
        )
    try:
        validation.usable(schema)
    except validation.SchemaUnusable as exc:
        raise ProjectError(f"{where}{exc.where}: {exc.reason}") from None


def _check_headers(schema: dict[str, Any], where: str) -> None:
    """`x-mcp-header` on top-level string/integer/boolean properties only, names unique
    without case (what SEP-2243 clients accept; a tool they would drop is refused here)."""
    properties = schema.get("properties")
    top = {id(v) for v in properties.values()} if isinstance(properties, dict) else set()
    seen: dict[str, str] = {}
    for path, node in validation.walk(schema):
        if not isinstance(node, dict) or X_MCP_HEADER not in node:
            continue
        at = f"{where}{validation.pointer(path)}/{X_MCP_HEADER}"
        if len(path) != 2 or path[0] != "properties" or id(node) not in top:
            raise ProjectError(f"{at}: only a top-level property can be a header")
        header = node[X_MCP_HEADER]
        if not isinstance(header, str) or not HEADER_NAME_RE.fullmatch(header):
            raise ProjectError(f"{at}: invalid header name {quote(header)} (1-64 HTTP token characters)")
        if node.get("type") not in HEADER_PROPERTY_TYPES:
            raise ProjectError(f"{at}: only string, integer and boolean properties can be headers")
        other = seen.get(header.lower())
        if other is not None:
            raise ProjectError(f"{at}: header {quote(header)} is already the header of {quote(other)}")
        seen[header.lower()] = str(path[1])


def check_input_schema(raw: Any, where: str) -> str:
    """An entrypoint's `inputSchema`, checked; returned as the JSON text tools/list serves
    (verbatim: key order and every keyword kept)."""
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected a JSON Schema object, got {json_type(raw)}")
    _check_bounds(raw, where)
    if raw.get("type") != "object":
        raise ProjectError(f'{where}/type: a tool\'s input schema must be "type": "object"')
    if "$schema" in raw and raw["$schema"] != DRAFT_2020_12:
        raise ProjectError(f"{where}/$schema: only {DRAFT_2020_12} is supported, not {quote(raw['$schema'])}")
    _check_valid(raw, where)
    _check_references(raw, where)
    _check_patterns(raw, where)
    _check_usable(raw, where)
    _check_headers(raw, where)
    return json.dumps(raw, ensure_ascii=False)


# --------------------------------------------------------------------------- questions


def _keys(prop: dict[str, Any], allowed: frozenset[str], at: str) -> None:
    extra = sorted(set(prop) - allowed)
    if extra:
        raise ProjectError(f"{at}: {quote(extra[0])} is not part of an elicitation form field")


def _str_list(value: Any, at: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ProjectError(f"{at}: expected a non-empty list of strings")
    if len(set(value)) != len(value):
        raise ProjectError(f"{at}: duplicate values")
    return value


def _titled(value: Any, at: str) -> list[str]:
    """`[{"const": "v", "title": "V"}, ...]`: the values."""
    if not isinstance(value, list) or not value:
        raise ProjectError(f'{at}: expected a non-empty list of {{"const", "title"}} objects')
    consts: list[str] = []
    for index, item in enumerate(value):
        if (
            not isinstance(item, dict)
            or set(item) != {"const", "title"}
            or not isinstance(item["const"], str)
            or not isinstance(item["title"], str)
        ):
            raise ProjectError(f'{at}/{index}: expected {{"const": string, "title": string}}')
        consts.append(item["const"])
    if len(set(consts)) != len(consts):
        raise ProjectError(f"{at}: duplicate values")
    return consts


def _counts(prop: dict[str, Any], keys: tuple[str, ...], at: str) -> None:
    for key in keys:
        value = prop.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProjectError(f"{at}/{key}: expected a non-negative integer")


_COMMON = frozenset({"type", "title", "description", "default"})


def _check_field(prop: Any, at: str) -> None:
    if not isinstance(prop, dict):
        raise ProjectError(f"{at}: expected a property schema object, got {json_type(prop)}")
    kind = prop.get("type")
    for key in ("title", "description"):
        if key in prop and not isinstance(prop[key], str):
            raise ProjectError(f"{at}/{key}: expected a string")
    has_default = "default" in prop
    default: Any = prop.get("default")
    if kind == "string":
        _keys(prop, _COMMON | {"enum", "enumNames", "oneOf", "format", "minLength", "maxLength"}, at)
        choices: list[str] | None = None
        if "enum" in prop and "oneOf" in prop:
            raise ProjectError(f"{at}: use enum or oneOf, not both")
        if "enum" in prop:
            choices = _str_list(prop["enum"], f"{at}/enum")
            if "enumNames" in prop and len(_str_list(prop["enumNames"], f"{at}/enumNames")) != len(choices):
                raise ProjectError(f"{at}/enumNames: one name per enum value")
        elif "enumNames" in prop:
            raise ProjectError(f"{at}/enumNames: only beside an enum")
        if "oneOf" in prop:
            choices = _titled(prop["oneOf"], f"{at}/oneOf")
        if "format" in prop and prop["format"] not in ELICITATION_FORMATS:
            raise ProjectError(f"{at}/format: expected one of {', '.join(ELICITATION_FORMATS)}")
        _counts(prop, ("minLength", "maxLength"), at)
        if has_default and (not isinstance(default, str) or (choices is not None and default not in choices)):
            raise ProjectError(f"{at}/default: expected one of the field's string values")
    elif kind in ("number", "integer"):
        _keys(prop, _COMMON | {"minimum", "maximum"}, at)

        def number(value: Any) -> bool:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return False
            return isinstance(value, int) or kind == "number"

        expected = "an integer" if kind == "integer" else "a number"
        for key in ("minimum", "maximum", "default"):
            if key in prop and not number(prop[key]):
                raise ProjectError(f"{at}/{key}: expected {expected}")
        low, high = prop.get("minimum", default), prop.get("maximum", default)
        if has_default and not low <= default <= high:
            raise ProjectError(f"{at}/default: outside minimum/maximum")
    elif kind == "boolean":
        _keys(prop, _COMMON, at)
        if has_default and not isinstance(default, bool):
            raise ProjectError(f"{at}/default: expected true or false")
    elif kind == "array":
        _keys(prop, _COMMON | {"items", "minItems", "maxItems"}, at)
        items = prop.get("items")
        if not isinstance(items, dict):
            raise ProjectError(
                f'{at}/items: expected {{"type": "string", "enum": [...]}} or {{"anyOf": [...]}}'
            )
        if "anyOf" in items:
            _keys(items, frozenset({"anyOf", "type"}), f"{at}/items")
            if items.get("type", "string") != "string":
                raise ProjectError(f"{at}/items/type: multi-select items are strings")
            values = _titled(items["anyOf"], f"{at}/items/anyOf")
        else:
            _keys(items, frozenset({"type", "enum"}), f"{at}/items")
            if items.get("type") != "string" or "enum" not in items:
                raise ProjectError(f'{at}/items: a multi-select needs "type": "string" and an enum')
            values = _str_list(items["enum"], f"{at}/items/enum")
        _counts(prop, ("minItems", "maxItems"), at)
        if has_default and (not isinstance(default, list) or any(v not in values for v in default)):
            raise ProjectError(f"{at}/default: expected a list of the field's values")
    else:
        raise ProjectError(
            f'{at}/type: expected "string", "number", "integer", "boolean" or "array", got {quote(kind)}'
        )


def check_ask_schema(raw: Any, where: str) -> dict[str, Any]:
    """A question asked with a JSON Schema: the MCP elicitation subset, checked; the copy
    returned is what is stored and elicited, key for key."""
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected a JSON Schema object, got {json_type(raw)}")
    _check_bounds(raw, where)
    _keys(raw, frozenset({"type", "properties", "required", "title", "description", "$schema"}), where)
    if raw.get("type") != "object":
        raise ProjectError(f'{where}/type: a question\'s schema must be "type": "object"')
    if "$schema" in raw and raw["$schema"] != DRAFT_2020_12:
        raise ProjectError(f"{where}/$schema: only {DRAFT_2020_12} is supported")
    properties = raw.get("properties", {})
    if not isinstance(properties, dict):
        raise ProjectError(f"{where}/properties: expected an object")
    if len(properties) > MAX_FIELDS:
        raise ProjectError(f"{where}/properties: more than {MAX_FIELDS} fields")
    for name, prop in properties.items():
        if not FIELD_NAME_RE.fullmatch(name):
            raise ProjectError(
                f"{where}/properties: invalid field name {quote(name)} (letters, digits and '_', not starting"
                " with a digit)"
            )
        _check_field(prop, f"{where}/properties/{name}")
    required = raw.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) and r in properties for r in required):
        raise ProjectError(f"{where}/required: expected a list of the schema's property names")
    _check_valid(raw, where)
    copy: dict[str, Any] = json.loads(json.dumps(raw))
    return copy
