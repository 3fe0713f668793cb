"""Values checked against a JSON Schema: the one validator construction (2020-12, formats
checked), the bounds every check runs within, and the one way to run a check from async
code (`run_check`).

What holds, whoever wrote the schema (a project at load, an external MCP server at receipt):
- Regular expressions run on RE2 (`google-re2`), whose time is linear in the text: `pattern`,
  `patternProperties` (and `additionalProperties` beside them), the `regex` format (a value
  is a regex when RE2 compiles it) and the `uri`/`uri-reference` formats. JSON Schema's
  patterns are ECMA-262: `\\uXXXX`, `\\u{X}`, `\\cX`, `\\s`/`\\S` (in a class too), `.` (no
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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import math
import reprlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator
from typing import Any, Final, ParamSpec, TypeVar

import anyio
import anyio.to_thread
import re2
import rfc3986_validator
from anyio.lowlevel import RunVar
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import FormatError, ValidationError
from jsonschema.validators import extend
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from webui import strict_json

P = ParamSpec("P")
T = TypeVar("T")

# No schema is ever fetched: a `$ref` resolves inside its own schema or not at all (the
# validator's default would retrieve remote references over the network).
NO_RETRIEVAL: Registry[Any] = Registry()

MAX_SCHEMA_BYTES: Final = 256 * 1024
MAX_SCHEMA_DEPTH: Final = 64
MAX_SCHEMA_NODES: Final = 20_000
MAX_PATTERN_CHARS: Final = 1024
MAX_INSTANCE_NODES: Final = 200_000
MAX_INSTANCE_DEPTH: Final = strict_json.MAX_DEPTH
MAX_INSTANCE_CHARS: Final = strict_json.MAX_CHARS
MAX_ERRORS: Final = 50
MAX_MESSAGE: Final = 300
CHECK_SECONDS: Final = 5.0
CHECK_THREADS: Final = 4
# One account's share of them: its checks never hold more than half the threads, and those of
# accounts holding none always find one free of it.
CHECK_THREADS_PER_ACCOUNT: Final = 1
# The largest integer a JSON number holds exactly in every reader (IEEE double).
SAFE_INTEGER: Final = 2**53 - 1
# Python's own limit on decimal digits (sys.get_int_max_str_digits' default).
MAX_DIGITS: Final = 4300
# RE2's memory per compiled pattern (program and matching caches): a larger one is refused.
_RE2_MAX_MEM: Final = 1024 * 1024
# RE2's time is linear in the text, but its constant grows with the pattern's program: when its
# DFA gives up (`[ab]*a[ab]{999}`), each byte costs up to one step per instruction (~15-30 ns on
# a loaded core). A pattern of more than MAX_PATTERN_PROGRAM instructions is refused; one search
# is at most PATTERN_WORK instructions x bytes (under ~0.6 s), a longer text is not checked.
MAX_PATTERN_PROGRAM: Final = 20_000
PATTERN_WORK: Final = 20_000_000

# Keywords whose subschemas apply to the value itself (not to an item or a property of it):
# a `$ref` loop through these alone never ends.
_IN_PLACE_LISTS: Final = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE: Final = ("not", "if", "then", "else")


class SchemaUnusable(ValueError):
    """A schema values cannot be checked against here; `where` is a JSON pointer into it."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where or '/'}: {reason}")
        self.where = where
        self.reason = reason


class CheckRefused(ValueError):
    """A value that was not checked (too large, too deep, too slow): its message says why."""


class _Timeout(Exception):
    """The check ran past its deadline (raised from inside the validator, caught by `problems`)."""


class _State(threading.local):
    deadline: float | None = None
    in_check: bool = False


_state = _State()


# --------------------------------------------------------------------------- regular expressions


# ECMA-262's `\\s`: its white space and line terminators (RE2's is ASCII only), as code point
# ranges: tab to carriage return, and the space separators (Zs), U+2028, U+2029, U+FEFF.
_SPACE_RANGES: Final = (
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
    (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
)  # fmt: skip


def _class_items(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges)


def _complement(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    low = 0
    for a, b in ranges:
        if a > low:
            out.append((low, a - 1))
        low = b + 1
    return [*out, (low, 0x10FFFF)] if low <= 0x10FFFF else out


_ECMA_SPACE: Final = _class_items(_SPACE_RANGES)
# ECMA-262's `\\S` as the items of a class (a class cannot hold a negated class in RE2).
_ECMA_NON_SPACE: Final = _class_items(_complement(_SPACE_RANGES))
# ECMA-262's `.`: any character but a line terminator (RE2's `.` takes all but \\n).
_ECMA_DOT: Final = "[^\\n\\r\\x{2028}\\x{2029}]"
# Escapes RE2 reads as its own (\\A start, \\z end, \\C a byte, \\Q...\\E quoting,
# \\pN without braces) where ECMA-262 refuses them or reads a letter.
_RE2_ONLY_ESCAPES: Final = "AzCQE"


def _ecma_to_re2(pattern: str) -> str:
    """An ECMA-262 pattern in RE2's syntax, or ValueError naming what RE2 cannot run or
    would read otherwise. One pass: escapes rewritten (`\\uXXXX`, `\\u{X}`, `\\cX`, `\\0`;
    `\\s` and `\\S` as ECMA's white space, in a class or not), `.` as any character but a line
    terminator, `(?<name>` as `(?P<name>`; RE2's own syntax (`(?i)` and other flags, `\\A`,
    `\\z`, `[[:alpha:]]`) refused."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("a pattern that ends with a lone backslash")
            e = pattern[i + 1]
            if e == "u" and pattern[i + 2 : i + 3] == "{":
                end = pattern.find("}", i + 3)
                digits = pattern[i + 3 : end] if end > 0 else ""
                if not digits or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise ValueError("a \\u{...} escape without hexadecimal digits")
                out.append(f"\\x{{{digits}}}")
                i = end + 1
                continue
            if e == "u":
                digits = pattern[i + 2 : i + 6]
                if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise ValueError("a \\u escape without four hexadecimal digits")
                out.append(f"\\x{{{digits}}}")
                i += 6
                continue
            if e == "c" and pattern[i + 2 : i + 3].isascii() and pattern[i + 2 : i + 3].isalpha():
                out.append(f"\\x{{{ord(pattern[i + 2]) % 32:02x}}}")
                i += 3
                continue
            if e == "0" and not pattern[i + 2 : i + 3].isdigit():
                out.append("\\x00")
                i += 2
                continue
            if e == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
                i += 2
                continue
            if e == "S":
                out.append(_ECMA_NON_SPACE if in_class else f"[^{_ECMA_SPACE}]")
                i += 2
                continue
            if e in _RE2_ONLY_ESCAPES or (e in "pP" and pattern[i + 2 : i + 3] != "{"):
                raise ValueError(f"\\{e}, which JSON Schema's patterns (ECMA-262) do not have")
            if e in "123456789" and not in_class:
                raise ValueError(f"a backreference (\\{e}), which the linear-time engine (RE2) does not run")
            if e == "k" and pattern[i + 2 : i + 3] == "<":
                raise ValueError(
                    "a backreference (\\k<name>), which the linear-time engine (RE2) does not run"
                )
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if pattern.startswith(("[:", "[=", "[."), i):
                raise ValueError(
                    f"a POSIX class ({pattern[i : i + 2]}...), which ECMA-262 patterns do not have"
                )
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        if c == ".":
            out.append(_ECMA_DOT)
            i += 1
            continue
        if c == "[":
            in_class = True
            # `]` right after `[` or `[^` is a literal in RE2 but closes an empty class in ECMA.
            if pattern.startswith("[^]", i):
                out.append("[\\x{0}-\\x{10FFFF}]")
                i += 3
                in_class = False
                continue
            if pattern.startswith("[]", i):
                raise ValueError("an empty class ([]), which matches nothing")
            out.append(c)
            i += 1
            continue
        if c == "(" and pattern.startswith("(?", i):
            if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
                raise ValueError(
                    "a lookaround ((?=, (?!, (?<=, (?<!), which the linear-time engine (RE2) does not run"
                )
            if pattern.startswith("(?<", i):
                out.append("(?P<")
                i += 3
                continue
            if not pattern.startswith("(?:", i):
                raise ValueError(
                    f"{pattern[i : i + 4]!r}: flags and other (? groups are not ECMA-262 (only (?: (?<name>)"
                )
        out.append(c)
        i += 1
    return "".join(out)


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # an error is returned to the caller, not printed whole to stderr
    options.never_capture = True  # only "does it match" is asked: no submatches to track
    options.max_mem = _RE2_MAX_MEM
    return options


_OPTIONS: Final = _options()


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """The RE2 program of an ECMA-262 pattern (it matches UTF-8 bytes), or ValueError saying
    why there is none."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"a pattern of {len(pattern)} characters (at most {MAX_PATTERN_CHARS})")
    translated = _ecma_to_re2(pattern)
    try:
        regex = re2.compile(translated.encode("utf-8", "surrogatepass"), _OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        raise ValueError(
            f"not a regular expression the linear-time engine (RE2) runs: {text[:120]}"
        ) from None
    if regex.programsize > MAX_PATTERN_PROGRAM:
        raise ValueError(
            f"too costly to run: {regex.programsize} RE2 instructions (at most {MAX_PATTERN_PROGRAM};"
            " a bounded repeat such as .{1,500} is that many copies of its part)"
        )
    return regex


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be used (None: it can, in linear time)."""
    try:
        _compiled(pattern)
    except ValueError as exc:
        return str(exc)
    return None


def _search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema patterns are not anchored).
    Lone surrogates (JSON allows `\\ud800`) are passed through as bytes, never an error."""
    try:
        regex = _compiled(pattern)
    except ValueError as exc:
        raise SchemaUnusable("", f"pattern {_clip(pattern)}: {exc}") from None
    data = text.encode("utf-8", "surrogatepass")
    if regex.programsize * len(data) > PATTERN_WORK:
        raise CheckRefused(
            f"a string of {len(data)} bytes is too long to check against pattern {_clip(pattern)}"
            f" ({regex.programsize} RE2 instructions; instructions x bytes at most {PATTERN_WORK})"
        )
    return regex.search(data) is not None


def _tick() -> None:
    """Stop the running check when past its deadline (looked at by every keyword, and inside
    the keywords that search once per property)."""
    deadline = _state.deadline
    if deadline is not None and time.monotonic() > deadline:
        raise _Timeout


def _verbose_to_plain(pattern: str) -> str:
    """A `re.VERBOSE` pattern without its whitespace and comments (RE2 has no verbose mode)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
        elif c == "#":
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end
            continue
        elif not c.isspace():
            out.append(c)
        i += 1
    return "".join(out)


# RFC 3986 as the `uri` formats check it (the rfc3986-validator grammar), run on RE2.
_URI: Final = re2.compile(_verbose_to_plain(rfc3986_validator.URI_RE_COMP.pattern).encode(), _OPTIONS)
_URI_REFERENCE: Final = re2.compile(
    _verbose_to_plain(rfc3986_validator.URI_REF_RE_COMP.pattern).encode(), _OPTIONS
)


def _is_regex(instance: object) -> bool:
    return not isinstance(instance, str) or pattern_problem(instance) is None


def _matches_whole(regex: Any) -> Callable[[object], bool]:
    def check(instance: object) -> bool:
        if not isinstance(instance, str):
            return True
        return regex.search(instance.encode("utf-8", "surrogatepass")) is not None

    return check


def _format_checker() -> FormatChecker:
    """2020-12's format checks, with those built on regular expressions run by RE2."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks("regex")(_is_regex)
    checker.checks("uri")(_matches_whole(_URI))
    checker.checks("uri-reference")(_matches_whole(_URI_REFERENCE))
    return checker


FORMAT_CHECKER: Final = _format_checker()


# --------------------------------------------------------------------------- keywords


class _Shown(reprlib.Repr):
    """Values as messages quote them: clipped, and a huge integer by its size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 80
        self.maxlist = self.maxdict = 6
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 200:
            return f"an integer of about {int(x.bit_length() * math.log10(2)) + 1} digits"
        return super().repr_int(x, level)


_SHOWN: Final = _Shown()


def shown(value: Any) -> str:
    """`value` as a message quotes it: at most about 80 characters."""
    return _SHOWN.repr(value)


def _clip(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


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
    if not _search(pattern, instance):
        yield ValidationError(f"{shown(instance)} does not match {_clip(pattern)}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            _tick()
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras: list[str] = []
    for key in instance:
        if key in properties:
            continue
        for pattern in patterns:
            _tick()
            if _search(pattern, key):
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
        names = ", ".join(_clip(key) for key in sorted(extras)[:10])
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
        yield ValidationError(f"{shown(instance)} is not a {_clip(str(fmt))}", cause=error.cause)


def _timed(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """`keyword`, first looking at the running check's deadline."""

    def timed(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _tick()
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


# --------------------------------------------------------------------------- schemas


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
        for key in _IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                targets += [((*path, key, i), sub) for i, sub in enumerate(node[key])]
        targets += [((*path, key), node[key]) for key in _IN_PLACE_ONE if key in node]
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
                    f"{_clip(ref)} points to nothing in the schema (nothing is fetched)",
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


# --------------------------------------------------------------------------- values


def _check_instance(instance: Any) -> None:
    """CheckRefused unless `instance` is within the bounds: its containers walked for depth
    and count (scalars are not visited one by one), its size measured as JSON."""
    count = 0
    stack: list[tuple[Any, int]] = [(instance, 0)] if isinstance(instance, dict | list) else []
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_INSTANCE_DEPTH:
            raise CheckRefused(f"too deep to check: nested more than {MAX_INSTANCE_DEPTH} levels")
        count += len(value)
        if count > MAX_INSTANCE_NODES:
            raise CheckRefused(f"too large to check: more than {MAX_INSTANCE_NODES} values")
        children = value.values() if type(value) is dict else value
        stack.extend([(child, depth + 1) for child in children if type(child) in (dict, list)])
    try:
        size = len(json.dumps(instance, ensure_ascii=False))
    except ValueError:  # an integer past Python's limit of digits (NaN is allowed here: JSON has none)
        raise CheckRefused(f"a number of more than {MAX_DIGITS} digits") from None
    if size > MAX_INSTANCE_CHARS:
        raise CheckRefused(f"too large to check: more than {MAX_INSTANCE_CHARS} characters of JSON")


def _not_on_the_loop() -> None:
    if _state.in_check:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # a thread (run_check's, or a synchronous caller's), or no loop at all
    raise RuntimeError("a JSON Schema check on the event loop: await run_check(...) instead")


def problems(
    schema: dict[str, Any] | bool, instance: Any, *, limit: int = MAX_ERRORS
) -> list[ValidationError]:
    """The problems of `instance` under `schema` (at most `limit`), found within `CHECK_SECONDS`.

    SchemaUnusable when the schema cannot be used here; CheckRefused when the value is too
    large or deep to check, or the check ran out of time. Never on the event loop."""
    _not_on_the_loop()
    checker = validator(schema)
    _check_instance(instance)
    outer = _state.deadline
    _state.deadline = time.monotonic() + CHECK_SECONDS if outer is None else outer
    try:
        return list(itertools.islice(checker.iter_errors(instance), limit))
    except _Timeout:
        raise CheckRefused(f"could not be checked within {CHECK_SECONDS:g} s") from None
    except RecursionError:
        raise CheckRefused("nested too deeply to check against this schema") from None
    finally:
        _state.deadline = outer


def field_errors(schema: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    """The first problem of each top-level field of `values`, by field name; problems of
    the object as a whole under "". Empty when the values fit, or when `schema` cannot be
    used here (then the schema's owner judges the values itself); a value too large or slow
    to check is a problem of the whole."""
    try:
        errors = problems(schema, values)
    except SchemaUnusable:
        return {}
    except CheckRefused as exc:
        return {"": f"not checked: {exc}"}
    out: dict[str, str] = {}
    for err in errors:
        path = list(err.absolute_path)
        out.setdefault(str(path[0]) if path else "", clipped(err.message))
    return out


def clipped(message: str) -> str:
    """A problem's message at most `MAX_MESSAGE` characters (jsonschema's quote the value)."""
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def describe(errors: Iterable[ValidationError]) -> list[str]:
    """`where: message` per problem (where: the dotted path into the value, clipped like the
    message), sorted by where."""
    parts: list[str] = []
    for err in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        where = clipped(".".join(str(p) for p in err.absolute_path))
        parts.append(f"{where}: {clipped(err.message)}" if where else clipped(err.message))
    return parts


# --------------------------------------------------------------------------- off the loop


class _Checks:
    """The checks' threads of one event loop: `CHECK_THREADS` in all, at most
    `CHECK_THREADS_PER_ACCOUNT` of them an account's, so accounts holding none always find one."""

    def __init__(self) -> None:
        self.threads = anyio.CapacityLimiter(CHECK_THREADS)
        # account -> (its limiter, checks using it): dropped when none is, so bounded by the
        # checks in flight or waiting.
        self.accounts: dict[Hashable, tuple[anyio.CapacityLimiter, int]] = {}

    @contextlib.asynccontextmanager
    async def share(self, account: Hashable) -> AsyncIterator[None]:
        limiter, users = self.accounts.get(account) or (anyio.CapacityLimiter(CHECK_THREADS_PER_ACCOUNT), 0)
        self.accounts[account] = (limiter, users + 1)
        try:
            async with limiter:
                yield
        finally:
            limiter, users = self.accounts[account]
            if users <= 1:
                del self.accounts[account]
            else:
                self.accounts[account] = (limiter, users - 1)


_checks: RunVar[_Checks] = RunVar("steamharness_checks")


def _checks_of_loop() -> _Checks:
    try:
        return _checks.get()
    except LookupError:
        checks = _Checks()
        _checks.set(checks)
        return checks


async def run_check(account: Hashable, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` — a JSON Schema check, or work around one — for `account` (whose
    values or whose schema it checks; None: no account, one share for all such checks) in a
    thread of the checks' own pool: never on the loop, never holding one of the database's
    threads. `CHECK_THREADS` per event loop, at most `CHECK_THREADS_PER_ACCOUNT` an account's
    (its other checks wait their turn). Each check inside is bounded by `CHECK_SECONDS`."""

    def work() -> T:
        _state.in_check = True
        try:
            return fn(*args, **kwargs)
        finally:
            _state.in_check = False

    checks = _checks_of_loop()
    async with checks.share(account):
        return await anyio.to_thread.run_sync(work, limiter=checks.threads)
