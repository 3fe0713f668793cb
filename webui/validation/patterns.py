"""JSON Schema's regular expressions (ECMA-262) on RE2, whose time is linear in the text:
the translation, the compiled programs and their bounds, and the formats built on them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Final

import re2
import rfc3986_validator
from jsonschema import Draft202012Validator, FormatChecker

from webui.validation.limits import (
    MAX_PATTERN_CHARS,
    MAX_PATTERN_PROGRAM,
    PATTERN_WORK,
    RE2_MAX_MEM,
    CheckRefused,
    SchemaUnusable,
    clip,
)

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
    would read otherwise. One pass: escapes rewritten (`\\uHHHH`, `\\u{X}`, `\\cX`, `\\0`;
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
    options.max_mem = RE2_MAX_MEM
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


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema patterns are not anchored).
    Lone surrogates (JSON allows `\\ud800`) are passed through as bytes, never an error."""
    try:
        regex = _compiled(pattern)
    except ValueError as exc:
        raise SchemaUnusable("", f"pattern {clip(pattern)}: {exc}") from None
    data = text.encode("utf-8", "surrogatepass")
    if regex.programsize * len(data) > PATTERN_WORK:
        raise CheckRefused(
            f"a string of {len(data)} bytes is too long to check against pattern {clip(pattern)}"
            f" ({regex.programsize} RE2 instructions; instructions x bytes at most {PATTERN_WORK})"
        )
    return regex.search(data) is not None


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
