"""Values checked against a JSON Schema: the one validator construction (2020-12, formats
checked), the bounds every check runs within, and the one way to run a check from async
code (`run_check`).

What holds, whoever wrote the schema (a project at load, an external MCP server at receipt):
- Regular expressions run on RE2 (`google-re2`), whose time is linear in the text: `pattern`,
  `patternProperties` (and `additionalProperties` beside them), the `regex` format (a value
  is a regex when RE2 compiles it) and the `uri`/`uri-reference` formats. JSON Schema's
  patterns are ECMA-262: `\\uHHHH`, `\\u{X}`, `\\cX`, `\\s`/`\\S` (in a class too), `.` (no
  line terminator) and `(?<name>` are translated; a construction RE2 cannot run (a lookaround,
  a backreference) or would read otherwise (`(?i)`, `\\A`, `[[:alpha:]]`) makes the schema unusable
  (`SchemaUnusable`, naming where), and so does any pattern RE2 refuses or one longer than
  `MAX_PATTERN_CHARS`.
- A schema is used only when `usable`: at most `MAX_SCHEMA_BYTES` of JSON, `MAX_SCHEMA_DEPTH`
  levels and `MAX_SCHEMA_NODES` objects and arrays; valid 2020-12; every `$ref` resolving
  inside it (`$dynamicRef`, a nested `$id` and anything remote are refused: nothing is ever
  fetched); no `$ref` loop that comes back to a schema without going into the value
  (`{"$ref": "#"}` at the root, `a → b → a`), which would recurse forever; no
  `unevaluatedProperties` beside `patternProperties` (its annotations would run Python's
  `re`).
- A value is checked (`problems`) only when at most `MAX_INSTANCE_NODES` values,
  `MAX_INSTANCE_DEPTH` levels and `MAX_INSTANCE_CHARS` characters of strings, and within
  `CHECK_SECONDS` (every keyword looks at the deadline); otherwise `CheckRefused`, a clear
  message. At most `MAX_ERRORS` problems are collected.
- `uniqueItems` hashes each item's canonical JSON (sorted keys, integral numbers as
  integers: `1` and `1.0` are one value, `true` and `1` two): linear, not pairwise.
- An `integer` is within JSON's safe range, ±(2^53−1), unless the schema's own `minimum`/
  `maximum` (or exclusive ones) reach further on that side; beyond it only digits are an
  integer (`1e308` is not one: it names no single integer).
- A check never runs on the event loop (`problems` refuses to) nor in a database thread:
  async code awaits `run_check`, which runs it in a thread of its own small pool
  (`CHECK_THREADS` per event loop, `CHECK_THREADS_PER_ACCOUNT` of them at most one account's),
  so checks can neither stall the loop nor take the database's threads, and one account's
  slow checks never hold every other account's.
- A search costs at most `PATTERN_WORK` (RE2 instructions × bytes of text): a pattern of more
  than `MAX_PATTERN_PROGRAM` instructions is refused, a text too long for its pattern is
  `CheckRefused`; a `pattern` beside a `maxLength` the text exceeds is not searched.

The package's modules: `limits` (the bounds, the errors, the deadline), `patterns` (RE2),
`keywords` (the validator class), `schemas` (`usable`, `validator`), `checks` (`problems`,
`run_check`).
"""

from webui.validation.checks import clipped, describe, field_errors, problems, run_check
from webui.validation.limits import (
    CHECK_SECONDS,
    CHECK_THREADS,
    CHECK_THREADS_PER_ACCOUNT,
    MAX_DIGITS,
    MAX_ERRORS,
    MAX_INSTANCE_CHARS,
    MAX_INSTANCE_DEPTH,
    MAX_INSTANCE_NODES,
    MAX_MESSAGE,
    MAX_PATTERN_CHARS,
    MAX_PATTERN_PROGRAM,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    NO_RETRIEVAL,
    PATTERN_WORK,
    SAFE_INTEGER,
    CheckRefused,
    SchemaUnusable,
    shown,
)
from webui.validation.patterns import FORMAT_CHECKER, pattern_problem
from webui.validation.schemas import pointer, ref_loop, usable, valid, validator, walk

__all__ = [
    "CHECK_SECONDS", "CHECK_THREADS", "CHECK_THREADS_PER_ACCOUNT", "FORMAT_CHECKER", "MAX_DIGITS",
    "MAX_ERRORS", "MAX_INSTANCE_CHARS", "MAX_INSTANCE_DEPTH", "MAX_INSTANCE_NODES", "MAX_MESSAGE",
    "MAX_PATTERN_CHARS", "MAX_PATTERN_PROGRAM", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_NODES",
    "NO_RETRIEVAL", "PATTERN_WORK", "SAFE_INTEGER", "CheckRefused", "SchemaUnusable", "clipped",
    "describe", "field_errors", "pattern_problem", "pointer", "problems", "ref_loop", "run_check",
    "shown", "usable", "valid", "validator", "walk",
]  # fmt: skip
