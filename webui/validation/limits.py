"""The bounds every JSON Schema check runs within (sizes, time, the engine's work), the
errors that say a schema or a value was refused, and the running check's deadline."""

from __future__ import annotations

import math
import reprlib
import threading
import time
from typing import Any, Final

from referencing import Registry

from webui import strict_json

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
RE2_MAX_MEM: Final = 1024 * 1024
# RE2's time is linear in the text, but its constant grows with the pattern's program: when its
# DFA gives up (`[ab]*a[ab]{999}`), each byte costs up to one step per instruction (~15-30 ns on
# a loaded core). A pattern of more than MAX_PATTERN_PROGRAM instructions is refused; one search
# is at most PATTERN_WORK instructions x bytes (under ~0.6 s), a longer text is not checked.
MAX_PATTERN_PROGRAM: Final = 20_000
PATTERN_WORK: Final = 20_000_000


class SchemaUnusable(ValueError):
    """A schema values cannot be checked against here; `where` is a JSON pointer into it."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where or '/'}: {reason}")
        self.where = where
        self.reason = reason


class CheckRefused(ValueError):
    """A value that was not checked (too large, too deep, too slow): its message says why."""


class PastDeadline(Exception):
    """The check ran past its deadline (raised from inside the validator, caught by `problems`)."""


class _State(threading.local):
    deadline: float | None = None
    in_check: bool = False


state = _State()


def tick() -> None:
    """Stop the running check when past its deadline (looked at by every keyword, and inside
    the keywords that search once per property)."""
    deadline = state.deadline
    if deadline is not None and time.monotonic() > deadline:
        raise PastDeadline


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


def clip(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")
