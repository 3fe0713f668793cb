"""Params: the input format shared by entrypoint `params` and `ctx.ask(fields)`.

One param definition in `package.json` becomes one `Param`; `param_report` is its plain
JSON shape in the structure report.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Final, Self, cast

from jsonschema import Draft202012Validator
from pydantic import (
    AfterValidator,
    FailFast,
    TypeAdapter,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

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
    problem,
    quote,
    unique_names,
    validated,
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
# A static choice in the package.json reference (params and configuration fields).
OPTION_SCHEMA: Final[dict[str, Any]] = {
    "description": "A static choice: a bare value, or `{value, label}` (the label is what a person sees).",
    "anyOf": [
        {"type": ["string", "number", "boolean"]},
        {
            "type": "object",
            "required": ["value"],
            "properties": {"value": {"type": ["string", "number", "boolean"]}, "label": {"type": "string"}},
        },
    ],
}


@dataclasses.dataclass(frozen=True)
class Option:
    """One static choice of a param; a bare string/number/bool in package.json has no label."""

    value: OptionValue
    label: str | None = None

    @property
    def title(self) -> str:
        """What a person sees for this choice: the label, else the value itself."""
        return self.label if self.label is not None else _display(self.value)


# The static choices of a param or a configuration field, as the package.json reference shows them.
Options = Annotated[tuple[Option, ...], WithJsonSchema({"type": "array", "items": OPTION_SCHEMA})]


def is_integer(value: Any) -> bool:
    """A JSON integer as package.json spells it: an int, never a bool (JSON `true` is not
    1) and never a float (write `2`, not `2.0`)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _display(value: Any) -> str:
    """JSON-ish rendering for messages and titles (`true`, not `True`)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _name_ok(value: Any) -> bool:
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None


def _header_ok(value: Any) -> bool:
    return isinstance(value, str) and HEADER_NAME_RE.fullmatch(value) is not None


@dataclass(
    frozen=True,
    config=described(
        "One input of an entrypoint (and the format of `ctx.ask` fields): it becomes one property of "
        "the tool's input schema."
    ),
)
class Param:
    """A normalized param (entrypoint input or `ctx.ask` field), its fields checked in reading
    order so the first problem is told.

    `multiple` is always true for `checkboxes`, so consumers only ever look at `multiple` to
    know whether the value is an array. `title` is `label` when only that synonym is given.
    """

    name: Annotated[
        str,
        check(
            _name_ok,
            lambda v: f"invalid param name {quote(v)} (letters, digits and '_', not starting with a digit)",
            {"type": "string", "pattern": anchored(NAME_RE)},
            required="",
        ),
    ] = ABSENT
    """The argument's name: letters, digits and `_`, not starting with a digit; unique within the
    entrypoint."""
    type: Annotated[
        str,
        one_of("param type", PARAM_TYPES),
    ] = ABSENT
    """`positional` is a string shown first; `checkboxes` a list of strings from its options; `file` a
    managed file (`{"id": "wf_…"}` over HTTP, an absolute path over stdio). An `integer`'s default and
    options are JSON integers."""
    required: Flag = False
    """The call must give it (default false)."""
    # Absent, not false, by default: `_multiple` tells them apart.
    multiple: Flag = ABSENT
    """The value is a list (always, for `checkboxes`)."""
    description: Text = None
    """What it is, for the client and the person."""
    title: Text = None
    """A person's name for it (`label` is taken as its synonym)."""
    label: Text = dataclasses.field(default=None, compare=False, repr=False)
    """Same as `title` (`title` wins)."""
    format: Annotated[
        str | None,
        check(
            lambda v: v in DATE_FORMATS,
            lambda v: f"unknown format {quote(v)} (expected one of: date, date-time)",
            {"enum": list(DATE_FORMATS)},
        ),
    ] = None
    """string and positional params only."""
    # `"header"`: the name after `Mcp-Param-` of the HTTP header a 2026-07-28 client mirrors
    # this param into (the input schema's `x-mcp-header`); entrypoint params only.
    header: Annotated[
        str | None,
        check(
            _header_ok,
            lambda v: (
                f"invalid header name {quote(v)} (1-64 HTTP token characters: letters, digits"
                " and !#$%&'*+-.^_`|~)"
            ),
            {"type": "string", "pattern": anchored(HEADER_NAME_RE)},
        ),
    ] = None
    """Mirror the argument as the `Mcp-Param-<header>` HTTP header (2026-07-28, SEP-2243). Single
    boolean, integer, positional, string params only; names unique without case."""
    options: Options = ()
    """The allowed values (not for file params)."""
    default: Any = None
    """A valid value of the param (one of its options, if it has any); file params have none."""

    _object = a_dict("a param object")

    @property
    def has_default(self) -> bool:
        """Whether a default is given (JSON null is none)."""
        return self.default is not None

    @field_validator("multiple", mode="wrap")
    @classmethod
    def _multiple(cls, raw: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> bool:
        multiple = handler(raw)
        if info.data.get("type") != "checkboxes":
            return multiple
        if raw is False:
            raise problem("checkboxes params are always multiple (remove 'multiple')")
        return True

    @field_validator("format")
    @classmethod
    def _format(cls, fmt: str | None, info: ValidationInfo) -> str | None:
        ptype = info.data.get("type")
        if fmt is not None and ptype is not None and ptype not in ("string", "positional"):
            raise problem(f"format applies only to string and positional params, not {ptype}")
        return fmt

    @field_validator("header")
    @classmethod
    def _header(cls, header: str | None, info: ValidationInfo) -> str | None:
        ptype, multiple = info.data.get("type"), info.data.get("multiple")
        if header is None or ptype is None or multiple is None:
            return header
        if ptype not in HEADER_TYPES or multiple:
            raise problem(
                f"only single string, positional, integer and boolean params can be headers, not {ptype}"
                + (" (multiple)" if multiple and ptype in HEADER_TYPES else "")
            )
        return header

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, raw: Any, info: ValidationInfo) -> tuple[Option, ...]:
        if isinstance(raw, tuple) or "type" not in info.data:
            return cast(tuple[Option, ...], raw) if isinstance(raw, tuple) else ()
        return _param_options(raw, info.data["type"])

    @field_validator("default")
    @classmethod
    def _default(cls, default: Any, info: ValidationInfo) -> Any:
        if default is None or not {"type", "multiple", "format", "options"} <= info.data.keys():
            return default
        ptype, fmt, options = info.data["type"], info.data["format"], info.data["options"]
        if ptype == "file":
            raise problem("file params cannot have a default")
        keys = {_key(o.value) for o in options}  # one lookup per item: a default list stays linear
        if not info.data["multiple"]:
            _check_one_default(default, ptype, fmt, options, keys, "")
        elif not isinstance(default, list):
            raise problem(f"expected an array for a multiple param, got {json_type(default)}")
        else:
            for index, item in enumerate(cast(list[Any], default)):
                _check_one_default(item, ptype, fmt, options, keys, f"[{index}]")
        return default

    @model_validator(mode="after")
    def _label(self) -> Self:
        """`title` wins; `label` is accepted as its synonym because forms commonly use it."""
        if self.title is None and self.label is not None:
            object.__setattr__(self, "title", self.label)
        return self


def _headers(params: tuple[Param, ...], info: ValidationInfo) -> tuple[Param, ...]:
    """Header names unique without case, and only where params may be headers (entrypoints)."""
    if info.context is None:  # built in code
        return params
    seen: dict[str, str] = {}
    for index, param in enumerate(params):
        if param.header is None:
            continue
        if not info.context["headers"]:
            raise problem("only entrypoint params can be mirrored as headers", at=f"[{index}].header")
        other = seen.get(param.header.lower())
        if other is not None:
            raise problem(
                f"header {quote(param.header)} is already the header of param {quote(other)}"
                " (header names are compared without case)",
                at=f"[{index}].header",
            )
        seen[param.header.lower()] = param.name
    return params


# A list of params, as a field's type (an entrypoint's `params`).
Params = Annotated[
    tuple[Param, ...], FailFast(), AfterValidator(_headers), unique_names("param"), listed("a list of params")
]
_PARAMS: Final = TypeAdapter(Params)


def parse_params(raw: Any, *, where: str, headers: bool = False) -> tuple[Param, ...]:
    """Validate and normalize a list of param definitions.

    Shared by entrypoint `params` and `ctx.ask(fields)`, which use the same format. `where`
    prefixes every error (e.g. `/x/package.json: entrypoints[0].params`), so the message
    points at the exact element: `<where>[2].type: ...`. `headers`: whether a param may be
    mirrored as a custom header (entrypoints yes, questions no).
    """
    return validated(_PARAMS, raw, where, {"headers": headers})


def _value_checker(ptype: str) -> tuple[Callable[[Any], bool], str]:
    """How to recognise one (non-array) value of a param type, and how to name it."""
    if ptype in STRING_TYPES:
        return (lambda v: isinstance(v, str)), "a string"
    if ptype == "number":
        return is_number, "a number"
    if ptype == "integer":
        return is_integer, "an integer"
    return (lambda v: isinstance(v, bool)), "true or false"


def _param_options(raw: Any, ptype: str) -> tuple[Option, ...]:
    """Static choices: bare values or `{"value", "label"}` objects, typed like the param.

    An empty list means "no static options" rather than "nothing is allowed".
    """
    if raw is None or raw == ():
        return ()
    if not isinstance(raw, list):
        raise problem(f"expected a list of options, got {json_type(raw)}")
    if not raw:
        return ()
    if ptype == "file":
        raise problem("file params cannot have options")
    is_valid, expected = _value_checker(ptype)
    return option_items(raw, is_valid, lambda v: f"option {quote(v)} is not {expected} (param type {ptype})")


def option_items(
    raw: list[Any],
    valid: Callable[[Any], bool],
    refused: Callable[[Any], str],
    *,
    value_required: bool = True,
) -> tuple[Option, ...]:
    """Each static choice, a bare value or `{"value", "label"}`, in order: valid and distinct
    (`true` is not `1`), each problem naming its item (`[2]`, `[2].value`, `[2].label`).
    `value_required`: a `{"label"}` without a value is told as that, not as a bad value."""
    options: list[Option] = []
    seen: set[tuple[bool, Any]] = set()
    for index, item in enumerate(raw):
        at, value, label = f"[{index}]", item, None
        if isinstance(item, dict):
            value, label = cast(dict[str, Any], item).get("value"), cast(dict[str, Any], item).get("label")
            if value is None and value_required:
                raise problem("is required", at=f"{at}.value")
            if label is not None and not isinstance(label, str):
                raise problem(f"expected a string, got {json_type(label)}", at=f"{at}.label")
            at += ".value"
        if not valid(value):
            raise problem(refused(value), at=at)
        if _key(value) in seen:
            raise problem(f"duplicate option {quote(value)}", at=at)
        seen.add(_key(value))
        options.append(Option(value=cast(OptionValue, value), label=label))
    return tuple(options)


def _key(value: Any) -> tuple[bool, Any]:
    """An option's value as a set member: `true` is not `1`, `1` is `1.0`."""
    return (isinstance(value, bool), value)


def _check_one_default(
    value: Any, ptype: str, fmt: str | None, options: tuple[Option, ...], keys: set[Any], at: str
) -> None:
    """Type, date format and option membership (`keys`) of one default value (a default must
    itself be a valid argument, or the tool would reject its own default)."""
    is_valid, expected = _value_checker(ptype)
    if not is_valid(value):
        raise problem(f"{quote(value)} is not {expected} (param type {ptype})", at=at)
    if fmt is not None and not FORMAT_CHECKER.conforms(value, fmt):
        raise problem(f"{quote(value)} is not a valid {fmt}", at=at)
    if options and _key(value) not in keys:
        allowed = ", ".join(quote(o.value) for o in options)
        raise problem(f"{quote(value)} is not one of the options ({allowed})", at=at)


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
