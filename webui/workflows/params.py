"""Params: the input format shared by entrypoint `params` and `ctx.ask(fields)`.

One param definition in `package.json` becomes one `Param`; `param_report` is its plain
JSON shape in the structure report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from jsonschema import Draft202012Validator

from webui.errors import ProjectError
from webui.workflows.package_json import (
    fail,
    is_number,
    json_type,
    optional_bool,
    optional_str,
    parse_named,
    quote,
)

PARAM_TYPES: Final = ("string", "positional", "number", "integer", "boolean", "checkboxes", "file")
STRING_TYPES: Final = frozenset({"string", "positional", "checkboxes"})
DATE_FORMATS: Final = ("date", "date-time")
# Params a custom HTTP header (`"header"`, SEP-2243 `x-mcp-header`) may mirror: one string,
# integer or boolean value. Not `number`: the spec forbids it (float to text is not portable).
HEADER_TYPES: Final = frozenset({"string", "positional", "integer", "boolean"})
# RFC 9110 token characters: all a header name may hold (it follows `Mcp-Param-`).
HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")

OptionValue = str | int | float | bool

# Param names, and configuration field names too (`configuration.py`).
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FORMAT_CHECKER = Draft202012Validator.FORMAT_CHECKER


@dataclass(frozen=True)
class Option:
    """One static choice of a param; a bare string/number/bool in package.json has no label."""

    value: OptionValue
    label: str | None = None

    @property
    def title(self) -> str:
        """What a person sees for this choice: the label, else the value itself."""
        return self.label if self.label is not None else _display(self.value)


@dataclass(frozen=True)
class Param:
    """A normalized param (entrypoint input or `ctx.ask` field).

    `has_default` exists because `None` cannot tell "no default" from a default we might
    one day allow to be null. `multiple` is always true for `checkboxes`, so consumers only
    ever look at `multiple` to know whether the value is an array.
    """

    name: str
    type: str
    required: bool = False
    default: Any = None
    has_default: bool = False
    description: str | None = None
    title: str | None = None
    options: tuple[Option, ...] = ()
    multiple: bool = False
    format: str | None = None
    # `"header"`: the name after `Mcp-Param-` of the HTTP header a 2026-07-28 client mirrors
    # this param into (the input schema's `x-mcp-header`); entrypoint params only.
    header: str | None = None


def is_integer(value: Any) -> bool:
    """A JSON integer as package.json spells it: an int, never a bool (JSON `true` is not
    1) and never a float (write `2`, not `2.0`)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _display(value: Any) -> str:
    """JSON-ish rendering for messages and titles (`true`, not `True`)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def parse_params(raw: Any, *, where: str, headers: bool = False) -> tuple[Param, ...]:
    """Validate and normalize a list of param definitions.

    Shared by entrypoint `params` and `ctx.ask(fields)`, which use the same format. `where`
    prefixes every error (e.g. `/x/package.json: entrypoints[0].params`), so the message
    points at the exact element: `<where>[2].type: ...`. `headers`: whether a param may be
    mirrored as a custom header (entrypoints yes, questions no).
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: expected a list of params, got {json_type(raw)}")
    params = parse_named(raw, where, _parse_param, "param")
    seen: dict[str, str] = {}
    for index, param in enumerate(params):
        if param.header is None:
            continue
        if not headers:
            raise fail(f"{where}[{index}]", ".header", "only entrypoint params can be mirrored as headers")
        other = seen.get(param.header.lower())
        if other is not None:
            raise fail(
                f"{where}[{index}]",
                ".header",
                f"header {quote(param.header)} is already the header of param {quote(other)}"
                " (header names are compared without case)",
            )
        seen[param.header.lower()] = param.name
    return params


def _parse_param(raw: Any, where: str) -> Param:
    """One param object; field checks run in reading order so the first problem is reported."""
    if not isinstance(raw, dict):
        raise ProjectError(f"{where}: expected a param object, got {json_type(raw)}")
    name = raw.get("name")
    if name is None:
        raise fail(where, ".name", "is required")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise fail(
            where,
            ".name",
            f"invalid param name {quote(name)} (letters, digits and '_', not starting with a digit)",
        )
    ptype = raw.get("type")
    if ptype is None:
        raise fail(where, ".type", f"is required (expected one of: {', '.join(PARAM_TYPES)})")
    if ptype not in PARAM_TYPES:
        raise fail(
            where,
            ".type",
            f"unknown param type {quote(ptype)} (expected one of: {', '.join(PARAM_TYPES)})",
        )
    required = optional_bool(raw, "required", where)
    multiple = optional_bool(raw, "multiple", where)
    if ptype == "checkboxes":
        if "multiple" in raw and raw["multiple"] is False:
            raise fail(where, ".multiple", "checkboxes params are always multiple (remove 'multiple')")
        multiple = True
    description = optional_str(raw, "description", where)
    title = _parse_title(raw, where)
    fmt = _parse_format(raw, ptype, where)
    header = _parse_header(raw, ptype, multiple, where)
    options = _parse_options(raw.get("options"), ptype, f"{where}.options")
    has_default = raw.get("default") is not None
    default = raw.get("default")
    if has_default:
        _check_default(default, ptype, multiple, fmt, options, f"{where}.default")
    return Param(
        name=name,
        type=ptype,
        required=required,
        default=default,
        has_default=has_default,
        description=description,
        title=title,
        options=options,
        multiple=multiple,
        format=fmt,
        header=header,
    )


def _parse_title(raw: dict[str, Any], where: str) -> str | None:
    """`title` wins; `label` is accepted as its synonym because forms commonly use it."""
    title = optional_str(raw, "title", where)
    label = optional_str(raw, "label", where)
    return title if title is not None else label


def _parse_format(raw: dict[str, Any], ptype: str, where: str) -> str | None:
    """Only date formats exist, and only string-valued params can carry them."""
    fmt = raw.get("format")
    if fmt is None:
        return None
    if fmt not in DATE_FORMATS:
        raise fail(where, ".format", f"unknown format {quote(fmt)} (expected one of: date, date-time)")
    if ptype not in ("string", "positional"):
        raise fail(where, ".format", f"format applies only to string and positional params, not {ptype}")
    return fmt


def _parse_header(raw: dict[str, Any], ptype: str, multiple: bool, where: str) -> str | None:
    """`"header": "Region"`: the param is also sent as the `Mcp-Param-Region` header."""
    header = raw.get("header")
    if header is None:
        return None
    if not isinstance(header, str) or not HEADER_NAME_RE.fullmatch(header):
        raise fail(
            where,
            ".header",
            f"invalid header name {quote(header)} (1-64 HTTP token characters: letters, digits"
            " and !#$%&'*+-.^_`|~)",
        )
    if ptype not in HEADER_TYPES or multiple:
        raise fail(
            where,
            ".header",
            f"only single string, positional, integer and boolean params can be headers, not {ptype}"
            + (" (multiple)" if multiple and ptype in HEADER_TYPES else ""),
        )
    return header


def _value_checker(ptype: str) -> tuple[Callable[[Any], bool], str]:
    """How to recognise one (non-array) value of a param type, and how to name it."""
    if ptype in STRING_TYPES:
        return (lambda v: isinstance(v, str)), "a string"
    if ptype == "number":
        return is_number, "a number"
    if ptype == "integer":
        return is_integer, "an integer"
    return (lambda v: isinstance(v, bool)), "true or false"


def _parse_options(raw: Any, ptype: str, where: str) -> tuple[Option, ...]:
    """Static choices: bare values or `{"value", "label"}` objects, typed like the param.

    An empty list means "no static options" rather than "nothing is allowed".
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProjectError(f"{where}: expected a list of options, got {json_type(raw)}")
    if not raw:
        return ()
    if ptype == "file":
        raise ProjectError(f"{where}: file params cannot have options")
    is_valid, expected = _value_checker(ptype)
    options: list[Option] = []
    seen: set[tuple[bool, Any]] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}[{index}]"
        value: Any
        label: str | None = None
        if isinstance(item, dict):
            if item.get("value") is None:
                raise ProjectError(f"{item_where}.value: is required")
            value = item["value"]
            label = optional_str(item, "label", item_where)
            value_where = f"{item_where}.value"
        else:
            value = item
            value_where = item_where
        if not is_valid(value):
            raise ProjectError(f"{value_where}: option {quote(value)} is not {expected} (param type {ptype})")
        key = (isinstance(value, bool), value)
        if key in seen:
            raise ProjectError(f"{value_where}: duplicate option {quote(value)}")
        seen.add(key)
        options.append(Option(value=value, label=label))
    return tuple(options)


def _check_default(
    default: Any, ptype: str, multiple: bool, fmt: str | None, options: tuple[Option, ...], where: str
) -> None:
    """A default must itself be a valid argument, or the tool would reject its own default."""
    if ptype == "file":
        raise ProjectError(f"{where}: file params cannot have a default")
    if multiple:
        if not isinstance(default, list):
            raise ProjectError(f"{where}: expected an array for a multiple param, got {json_type(default)}")
        for index, item in enumerate(default):
            _check_one_default(item, ptype, fmt, options, f"{where}[{index}]")
    else:
        _check_one_default(default, ptype, fmt, options, where)


def _check_one_default(
    value: Any, ptype: str, fmt: str | None, options: tuple[Option, ...], where: str
) -> None:
    """Type, date format and option membership of one default value."""
    is_valid, expected = _value_checker(ptype)
    if not is_valid(value):
        raise ProjectError(f"{where}: {quote(value)} is not {expected} (param type {ptype})")
    if fmt is not None and not FORMAT_CHECKER.conforms(value, fmt):
        raise ProjectError(f"{where}: {quote(value)} is not a valid {fmt}")
    if options and not any(
        isinstance(o.value, bool) == isinstance(value, bool) and o.value == value for o in options
    ):
        allowed = ", ".join(quote(o.value) for o in options)
        raise ProjectError(f"{where}: {quote(value)} is not one of the options ({allowed})")


def param_report(param: Param) -> dict[str, Any]:
    """A param as plain JSON, the same shape for every param so clients need no guessing."""
    doc: dict[str, Any] = {
        "name": param.name,
        "type": param.type,
        "required": param.required,
        "multiple": param.multiple,
        "title": param.title,
        "description": param.description,
        "format": param.format,
        "options": [{"value": o.value, "label": o.label} for o in param.options],
    }
    if param.header is not None:
        doc["header"] = param.header
    if param.has_default:
        doc["default"] = param.default
    return doc
