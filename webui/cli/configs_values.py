"""Configuration values from the command line: `FIELD=VALUE` typed by the field, and
secret values read from stdin (`--secret FIELD`), for `steamharness configs create` and `set`.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from pydantic import FiniteFloat, TypeAdapter, ValidationError

from webui import strict_json
from webui.cli.common import terminal_safe
from webui.errors import ConfigError, ConfigurationInvalid

if TYPE_CHECKING:
    from webui.configs.model import ConfigPlace
    from webui.workflows.configuration import ConfigField

# How a command-line word becomes each field type's value (pydantic's lax parsing of text):
# a number is an integer when it reads as one, else a finite float; a boolean is one of
# true/false, yes/no, on/off, 1/0 (t/f, y/n too). Other types are taken as text and checked by
# the configuration service like any value.
_NUMBER: Final = TypeAdapter(int | FiniteFloat)
_BOOLEAN: Final = TypeAdapter(bool)


def parse_value(field: ConfigField, text: str) -> Any:
    """A command-line value as the field's type; raises ValueError with the problem."""
    if field.type == "number":
        try:
            return _NUMBER.validate_python(text.strip())
        except ValidationError as exc:
            finite = any(e["type"] == "finite_number" for e in exc.errors(include_url=False))
            raise ValueError(f"expected a {'finite ' if finite else ''}number, got {text!r}") from None
    if field.type == "boolean":
        try:
            return _BOOLEAN.validate_python(text.strip())
        except ValidationError:
            raise ValueError(f"expected true or false, got {text!r}") from None
    if field.type == "multiselect":
        if text.lstrip().startswith("["):
            try:
                items = strict_json.loads(text)  # bounded: the strict reader's depth and size
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON array: {exc.msg}") from None
            except ValueError as exc:
                raise ValueError(f"not a JSON array: {exc}") from None
            if not isinstance(items, list):
                raise ValueError("expected a JSON array or a comma-separated list")
            return items
        return [item.strip() for item in text.split(",") if item.strip()]
    return text  # string, select, date: checked by the service as text


def command_line_values(
    place: ConfigPlace, assignments: Sequence[str], secrets: Sequence[str], unset: Sequence[str] = ()
) -> dict[str, Any]:
    """The values named on the command line (FIELD=VALUE) and the secrets read from stdin.
    Every problem names its field; nothing is read from stdin before the arguments check out."""
    by_name = {f.name: f for f in place.fields}
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"expected FIELD=VALUE, got {item!r}")
        if name in values or name in problems:
            problems[name] = "given twice"
            continue
        field = by_name.get(name)
        if field is None:
            problems[name] = "unknown field (not declared in package.json configuration.fields)"
            continue
        if field.secret:
            problems[name] = (
                f"is a secret: its value is not taken from the command line; use --secret {name} "
                "and write the value on stdin"
            )
            continue
        try:
            value = parse_value(field, text)
        except ValueError as exc:
            problems[name] = str(exc)
            continue
        from webui.workflows.configuration import value_problem  # jsonschema: not for `--help`

        problem = value_problem(field, value)
        if problem:
            problems[name] = problem
        else:
            values[name] = value
    for index, name in enumerate(secrets):
        field = by_name.get(name)
        if name in secrets[:index]:
            problems[name] = "--secret given twice"
        elif field is None:
            problems[name] = "unknown field (not declared in package.json configuration.fields)"
        elif not field.secret:
            problems[name] = f"--secret: is a {field.type} field, not a secret (give {name}=VALUE)"
    for name in unset:
        if name in values or name in secrets:
            problems[name] = "both set and unset"
    if problems:
        listed = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
        raise ConfigurationInvalid(f"the values are not valid: {listed}", problems)
    for name in secrets:
        values[name] = read_secret(name)
    return values


def read_secret(name: str) -> str:
    if sys.stdin.isatty():
        value = getpass.getpass(terminal_safe(f"{name}: "))
    else:
        line = sys.stdin.readline()
        if not line:
            raise ConfigError(f"--secret {name}: stdin ended before its value (one line per secret)")
        value = line.rstrip("\r\n")
    if not value:
        raise ConfigError(f"--secret {name}: the value is empty (use --unset {name} to remove it)")
    return value


# ----------------------------------------------------------------- output
