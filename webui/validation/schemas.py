"""Schemas: whether one can be used here (`usable`: size, 2020-12, references, patterns)
and the one validator of each distinct schema."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any, Final

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from webui.validation.keywords import Checked
from webui.validation.limits import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    NO_RETRIEVAL,
    SchemaUnusable,
    clip,
)
from webui.validation.patterns import FORMAT_CHECKER, pattern_problem

# Keywords whose subschemas apply to the value itself (not to an item or a property of it):
# a `$ref` loop through these alone never ends.
IN_PLACE_LISTS: Final = ("allOf", "anyOf", "oneOf")
IN_PLACE_ONE: Final = ("not", "if", "then", "else")


def pointer(path: tuple[str | int, ...]) -> str:
    """`path` as a JSON Pointer."""
    return "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in path)


def walk(document: Any) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every value of the document with its path, iteratively."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), document)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))


def _sized(schema: Any) -> str:
    """The schema's canonical JSON text, once it is known to be within the bounds (its
    containers are counted before any is expanded, so a huge one costs no more than the cap)."""
    count = 0
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict | list):
            continue
        count += 1 + len(node)
        if len(path) >= MAX_SCHEMA_DEPTH:
            raise SchemaUnusable(pointer(path[:8]) + "/...", f"nested more than {MAX_SCHEMA_DEPTH} levels")
        if count > MAX_SCHEMA_NODES:
            raise SchemaUnusable("", f"more than {MAX_SCHEMA_NODES} values")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend(((*path, k), v) for k, v in items)
    try:
        text = json.dumps(schema, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError):
        raise SchemaUnusable(
            "", "not a JSON document (NaN, Infinity or a value JSON has no form for)"
        ) from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise SchemaUnusable("", f"{len(text)} characters of JSON, more than {MAX_SCHEMA_BYTES}")
    return text


def valid(schema: Any) -> None:
    """SchemaUnusable unless `schema` is valid JSON Schema 2020-12 (by its metaschema)."""
    try:
        # Formats off: the metaschema's `format: regex` would compile patterns with Python's
        # `re` (recursive, backtracking); they are compiled by RE2 below instead.
        error = next(Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(schema), None)
    except RecursionError:
        raise SchemaUnusable("", "nested too deeply to check") from None
    if error is not None:
        raise SchemaUnusable(
            pointer(tuple(error.absolute_path)), f"not valid JSON Schema 2020-12: {error.message[:200]}"
        )


def _check_patterns(schema: Any) -> None:
    unevaluated = any(isinstance(node, dict) and "unevaluatedProperties" in node for _, node in walk(schema))
    for path, node in walk(schema):
        if not isinstance(node, dict):
            continue
        found: list[tuple[tuple[str | int, ...], Any]] = []
        if "pattern" in node:
            found.append(((*path, "pattern"), node["pattern"]))
        if isinstance(node.get("patternProperties"), dict):
            found += [((*path, "patternProperties", key), key) for key in node["patternProperties"]]
            if unevaluated:
                raise SchemaUnusable(
                    pointer((*path, "patternProperties")),
                    "not supported beside unevaluatedProperties (use additionalProperties)",
                )
        for at, pattern in found:
            if isinstance(pattern, str) and (problem := pattern_problem(pattern)):
                raise SchemaUnusable(pointer(at), f"refused: {problem}")


def _resolver(schema: dict[str, Any]) -> Any:
    resource = DRAFT202012.create_resource(schema)
    base = resource.id() or ""
    return Registry().with_resource(base, resource).crawl().resolver(base_uri=base)


def _check_references(schema: Any) -> dict[int, list[tuple[tuple[str | int, ...], Any]]]:
    """Every `$ref` resolving inside the schema: the schemas each in-place node leads to
    (by the node's id), its `$ref` target included."""
    resolver = _resolver(schema) if isinstance(schema, dict) else None
    edges: dict[int, list[tuple[tuple[str | int, ...], Any]]] = {}
    for path, node in walk(schema):
        if not isinstance(node, dict):
            continue
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in node:
                raise SchemaUnusable(pointer((*path, key)), "not supported")
        if path and "$id" in node:
            raise SchemaUnusable(pointer((*path, "$id")), "not supported below the root")
        targets: list[tuple[tuple[str | int, ...], Any]] = []
        for key in IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                targets += [((*path, key, i), sub) for i, sub in enumerate(node[key])]
        targets += [((*path, key), node[key]) for key in IN_PLACE_ONE if key in node]
        if isinstance(node.get("dependentSchemas"), dict):
            targets += [((*path, "dependentSchemas", k), v) for k, v in node["dependentSchemas"].items()]
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                found = resolver.lookup(ref).contents if resolver is not None else None
            except Unresolvable:
                found = None
            if found is None:
                raise SchemaUnusable(
                    pointer((*path, "$ref")),
                    f"{clip(ref)} points to nothing in the schema (nothing is fetched)",
                )
            targets.append(((*path, "$ref"), found))
        edges[id(node)] = [(at, sub) for at, sub in targets if isinstance(sub, dict)]
    return edges


def ref_loop(schema: Any) -> str | None:
    """Where a `$ref` comes back to a schema it started from without going into the value
    (a pointer to that `$ref`); None when there is no such loop. Every `$ref` must resolve
    (`SchemaUnusable` otherwise)."""
    edges = _check_references(schema)
    if not isinstance(schema, dict):
        return None
    done: set[int] = set()
    for _, start in walk(schema):
        if not isinstance(start, dict) or id(start) in done:
            continue
        # Iterative depth-first search over in-place edges; `active` holds the current path.
        active: set[int] = {id(start)}
        stack: list[Iterator[tuple[tuple[str | int, ...], Any]]] = [iter(edges.get(id(start), []))]
        trail: list[int] = [id(start)]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                finished = trail.pop()
                active.discard(finished)
                done.add(finished)
                continue
            at, sub = step
            if id(sub) in active:
                return pointer(at)
            if id(sub) in done:
                continue
            active.add(id(sub))
            trail.append(id(sub))
            stack.append(iter(edges.get(id(sub), [])))
    return None


def usable(schema: Any) -> None:
    """Raise `SchemaUnusable` unless values can be checked against `schema` here (see the
    module's rules); the first problem found, with where it is."""
    if not isinstance(schema, dict | bool):
        raise SchemaUnusable("", "a schema is an object (or true/false)")
    _sized(schema)
    valid(schema)
    loop = ref_loop(schema)
    if loop is not None:
        raise SchemaUnusable(loop, "a reference loop: it comes back here without going into the value")
    _check_patterns(schema)


@functools.lru_cache(maxsize=128)
def _prepared(schema_key: str) -> Any:
    """The validator of one distinct schema (by its canonical JSON), or the SchemaUnusable
    that says why there is none. Screening a schema and building its validator cost far
    more than a check."""
    schema = json.loads(schema_key)
    try:
        usable(schema)
    except SchemaUnusable as exc:
        return exc
    return Checked(schema, format_checker=FORMAT_CHECKER, registry=NO_RETRIEVAL)


def validator(schema: dict[str, Any] | bool) -> Any:
    """The validator for `schema`: formats checked, regular expressions on RE2, references
    only inside `schema` itself. SchemaUnusable when it cannot be used here. Its checks have
    no deadline: use `problems` for values from outside."""
    prepared = _prepared(_sized(schema))
    if isinstance(prepared, SchemaUnusable):
        raise prepared
    return prepared
