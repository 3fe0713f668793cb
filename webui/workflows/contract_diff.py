"""The tool contract between two catalogs: what a client of the old one would see change.

Pure: two lists of tools (name, input schema, output schema, as MCP lists them) in, a list
of changes out. A change is *breaking* when a client that worked against the old catalog
(typically one pinned to `latest`) may fail against the new one: a tool or param removed
(input objects are closed), a new required param, a param that became required, a type
or format changed, allowed values removed, or output the client may read no longer
promised (an output property removed, no longer required, or of another type).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal[
    "tool_added",
    "tool_removed",
    "tool_changed",
    "param_added",
    "param_removed",
    "param_changed",
    "output_changed",
]


@dataclass(frozen=True)
class ToolContract:
    name: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None
    title: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    tool: str
    param: str | None
    breaking: bool
    detail: str

    def line(self) -> str:
        """One line for a terminal: `BREAKING param_added greet.lang: new required param`."""
        where = f"{self.tool}.{self.param}" if self.param else self.tool
        return f"{'BREAKING ' if self.breaking else ''}{self.kind} {where}: {self.detail}"


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _props(schema: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    props = (schema or {}).get("properties")
    return dict(props) if isinstance(props, Mapping) else {}


def _required(schema: Mapping[str, Any] | None) -> set[str]:
    req = (schema or {}).get("required")
    return {str(r) for r in req} if isinstance(req, list) else set()


def type_of(schema: Mapping[str, Any]) -> str:
    """`string`, `array of number`, `object{id}`: what a value must be, for comparing and showing."""
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"array of {type_of(items) if isinstance(items, Mapping) else 'any'}"
    if kind == "object" and isinstance(schema.get("properties"), Mapping):
        return f"object{{{','.join(sorted(schema['properties']))}}}"
    if kind is None:
        return "any"
    return kind if isinstance(kind, str) else _text(kind)


def _value_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    items = schema.get("items")
    return items if schema.get("type") == "array" and isinstance(items, Mapping) else schema


def allowed_values(schema: Mapping[str, Any]) -> list[Any] | None:
    """The values a param allows (enum, or the consts of oneOf/anyOf); None: not a closed list."""
    value = _value_schema(schema)
    if isinstance(value.get("enum"), list):
        return list(value["enum"])
    for key in ("oneOf", "anyOf"):
        choices = value.get(key)
        if isinstance(choices, list) and all(isinstance(c, Mapping) and "const" in c for c in choices):
            return [c["const"] for c in choices]
    return None


def _format_of(schema: Mapping[str, Any]) -> str | None:
    fmt = _value_schema(schema).get("format")
    return fmt if isinstance(fmt, str) else None


def _param_changes(tool: str, name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    changes: list[Change] = []

    def add(breaking: bool, detail: str) -> None:
        changes.append(Change("param_changed", tool, name, breaking, detail))

    if type_of(old) != type_of(new):
        add(True, f"type changed from {type_of(old)} to {type_of(new)}")
    old_values, new_values = allowed_values(old), allowed_values(new)
    if old_values != new_values:
        if new_values is None:
            add(False, "any value allowed now (was a fixed list)")
        elif old_values is None:
            add(True, f"only these values allowed now: {_text(new_values)}")
        else:
            gone = [v for v in old_values if v not in new_values]
            added = [v for v in new_values if v not in old_values]
            if gone:
                add(True, f"values no longer allowed: {_text(gone)}")
            if added:
                add(False, f"values added: {_text(added)}")
    old_fmt, new_fmt = _format_of(old), _format_of(new)
    if old_fmt != new_fmt:
        add(new_fmt is not None, f"format changed from {old_fmt or 'none'} to {new_fmt or 'none'}")
    if old.get("default") != new.get("default") or ("default" in old) != ("default" in new):
        before = _text(old["default"]) if "default" in old else "none"
        after = _text(new["default"]) if "default" in new else "none"
        add(False, f"default changed from {before} to {after}")
    for key in ("title", "description"):
        if old.get(key) != new.get(key):
            add(False, f"{key} changed")
    return changes


def _input_changes(tool: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    changes: list[Change] = []
    old_props, new_props = _props(old), _props(new)
    old_req, new_req = _required(old), _required(new)
    for name in sorted(old_props.keys() - new_props.keys()):
        changes.append(Change("param_removed", tool, name, True, "param removed; calls that send it fail"))
    for name in sorted(new_props.keys() - old_props.keys()):
        if name in new_req:
            changes.append(
                Change("param_added", tool, name, True, f"new required param ({type_of(new_props[name])})")
            )
        else:
            changes.append(
                Change("param_added", tool, name, False, f"new optional param ({type_of(new_props[name])})")
            )
    for name in sorted(old_props.keys() & new_props.keys()):
        if name in new_req and name not in old_req:
            changes.append(Change("param_changed", tool, name, True, "became required"))
        elif name in old_req and name not in new_req:
            changes.append(Change("param_changed", tool, name, False, "became optional"))
        changes += _param_changes(tool, name, old_props[name], new_props[name])
    return changes


def _output_changes(tool: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Change]:
    if old == new:
        return []
    if old is None or new is None:
        breaking = new is None  # no longer promised at all
        detail = "output schema removed" if new is None else "output schema added"
        return [Change("output_changed", tool, None, breaking, detail)]
    changes: list[Change] = []
    old_props, new_props = _props(old), _props(new)
    old_req, new_req = _required(old), _required(new)
    for name in sorted(old_props.keys() - new_props.keys()):
        changes.append(Change("output_changed", tool, name, True, "output property removed"))
    for name in sorted(new_props.keys() - old_props.keys()):
        changes.append(Change("output_changed", tool, name, False, "output property added"))
    for name in sorted(old_props.keys() & new_props.keys()):
        if type_of(old_props[name]) != type_of(new_props[name]):
            before, after = type_of(old_props[name]), type_of(new_props[name])
            changes.append(
                Change("output_changed", tool, name, True, f"output type changed from {before} to {after}")
            )
    for name in sorted((old_req - new_req) & new_props.keys()):
        changes.append(Change("output_changed", tool, name, True, "output property no longer always present"))
    if not changes:
        changes.append(Change("output_changed", tool, None, False, "output schema details changed"))
    return changes


def diff_catalogs(old: Sequence[ToolContract], new: Sequence[ToolContract]) -> list[Change]:
    """The changes from `old` to `new`, tool by tool in name order; empty when the contracts match."""
    before = {t.name: t for t in old}
    after = {t.name: t for t in new}
    changes: list[Change] = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if now is None:
            changes.append(Change("tool_removed", name, None, True, "tool removed; calls to it fail"))
            continue
        if was is None:
            changes.append(Change("tool_added", name, None, False, "new tool"))
            continue
        for key in ("title", "description"):
            if getattr(was, key) != getattr(now, key):
                changes.append(Change("tool_changed", name, None, False, f"{key} changed"))
        changes += _input_changes(name, was.input_schema, now.input_schema)
        changes += _output_changes(name, was.output_schema, now.output_schema)
    return changes


def is_breaking(changes: Sequence[Change]) -> bool:
    return any(c.breaking for c in changes)
