"""Values checked against a JSON Schema: the one validator construction (2020-12, formats
checked) and the per-field messages forms show beside their controls."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable

# No schema is ever fetched: a `$ref` resolves inside its own schema or not at all (the
# validator's default would retrieve remote references over the network).
NO_RETRIEVAL: Registry[Any] = Registry()


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for `schema` that also checks formats (date, email, uri, …) and resolves
    references only inside `schema` itself."""
    return Draft202012Validator(
        schema, format_checker=Draft202012Validator.FORMAT_CHECKER, registry=NO_RETRIEVAL
    )


def field_errors(schema: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    """The first problem of each top-level field of `values`, by field name; problems of
    the object as a whole under "". Empty when the values fit, or when `schema` is not
    valid JSON Schema (then the schema's owner judges the values itself)."""
    try:
        errors = list(validator(schema).iter_errors(values))
    except (SchemaError, Unresolvable):
        return {}
    out: dict[str, str] = {}
    for err in errors:
        path = list(err.absolute_path)
        out.setdefault(str(path[0]) if path else "", err.message)
    return out
