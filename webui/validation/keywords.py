"""The keywords this server checks its own way (patterns on RE2, `uniqueItems` linear,
integers within JSON's safe range, the deadline looked at by each), and `Checked`, the
validator class built from them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import FormatError, ValidationError
from jsonschema.validators import extend

from webui.validation.limits import SAFE_INTEGER, clip, shown, tick
from webui.validation.patterns import FORMAT_CHECKER, search


def _canonical(value: Any) -> str:
    """One text per JSON value as JSON Schema compares them: keys sorted, an integral number
    written as an integer (`1.0` is `1`), `true` distinct from `1`."""

    def normal(v: Any) -> Any:
        kind = type(v)
        if kind is float:
            return int(v) if v.is_integer() else v
        if kind is dict:
            return {k: normal(item) for k, item in v.items()}
        if kind is list:
            return [normal(item) for item in v]
        return v

    return json.dumps(normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError(f"{shown(instance)} has non-unique elements")
            return
        seen.add(key)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    limit = schema.get("maxLength") if isinstance(schema, dict) else None
    if isinstance(limit, int) and not isinstance(limit, bool) and len(instance) > limit:
        return  # refused by maxLength already: a search of a text longer than allowed is waste
    if not search(pattern, instance):
        yield ValidationError(f"{shown(instance)} does not match {clip(pattern)}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            tick()
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras: list[str] = []
    for key in instance:
        if key in properties:
            continue
        for pattern in patterns:
            tick()
            if search(pattern, key):
                break
        else:
            extras.append(key)
    return extras


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        names = ", ".join(clip(key) for key in sorted(extras)[:10])
        more = f" and {len(extras) - 10} more" if len(extras) > 10 else ""
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({names}{more} {verb} unexpected)")


def _integer_problem(value: int | float, schema: dict[str, Any]) -> str | None:
    """Why `value`, an integer to JSON Schema, is not one this server takes (None: it is)."""
    if isinstance(value, float):
        if abs(value) <= SAFE_INTEGER:
            return None
        return (
            f"{shown(value)} is not an integer within ±{SAFE_INTEGER} (2^53-1, what a JSON number"
            " holds exactly); write a larger integer in digits"
        )
    low, high = -SAFE_INTEGER, SAFE_INTEGER
    for key in ("maximum", "exclusiveMaximum"):
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and bound > high:
            high = bound  # the schema's own bound says how far; it is checked as usual
    for key in ("minimum", "exclusiveMinimum"):
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and bound < low:
            low = bound
    if low <= value <= high:
        return None
    return (
        f"{shown(value)} is outside the integers taken here: ±{SAFE_INTEGER} (2^53-1, what a JSON"
        " number holds exactly), unless the schema's minimum/maximum allow more"
    )


def _typed(original: Callable[..., Any]) -> Callable[..., Iterator[ValidationError]]:
    def type_(validator: Any, types: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        yield from original(validator, types, instance, schema) or ()
        listed = [types] if isinstance(types, str) else list(types)
        if (
            "integer" in listed
            and "number" not in listed
            and isinstance(instance, int | float)
            and not isinstance(instance, bool)
            and validator.is_type(instance, "integer")
        ):
            problem = _integer_problem(instance, schema)
            if problem is not None:
                yield ValidationError(problem)

    return type_


def _format(validator: Any, fmt: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.format_checker is None:
        return
    try:
        validator.format_checker.check(instance, fmt)
    except FormatError as error:
        yield ValidationError(f"{shown(instance)} is not a {clip(str(fmt))}", cause=error.cause)


def _timed(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """`keyword`, first looking at the running check's deadline."""

    def timed(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        tick()
        return keyword(validator, value, instance, schema)

    return timed


def _keywords() -> dict[str, Callable[..., Any]]:
    keywords: dict[str, Callable[..., Any]] = dict(Draft202012Validator.VALIDATORS)
    keywords.update(
        pattern=_pattern,
        patternProperties=_pattern_properties,
        additionalProperties=_additional_properties,
        uniqueItems=_unique_items,
        format=_format,
        type=_typed(keywords["type"]),
    )
    return {name: _timed(keyword) for name, keyword in keywords.items()}


Checked: Final[Any] = extend(Draft202012Validator, validators=_keywords(), format_checker=FORMAT_CHECKER)
