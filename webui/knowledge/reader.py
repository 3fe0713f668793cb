"""A file's text read for the knowledge base, never in the server's event loop or a
database thread.

HTML, PDF and .docx files are parsed in a bounded child process (webui.bounded_child, running
`webui.knowledge.extract.extract_child`): past `seconds` of wall-clock time the child is
killed and the file refused ("the PDF could not be read within 30 s"), past `memory_bytes`
of address space likewise; a text larger than a document may be is refused by the child.
The child runs with none of the server's environment, and as `run_as` (the server's
`worker_user`) when the server runs as root. Plain text and Markdown are only decoded, in a
plain thread. A refused file stores nothing: the text is read before any database work.

At most `per_account` files of one account and `total` of the whole server process are
parsed at once, and the server's last `reserved_turns(total)` turns (a quarter, at least one
of two or more: 1 of the default 4) are kept for accounts with no file being read, one each:
an account takes a second turn only while that reserve stays free, so no two accounts at
their own cap take every turn. A file past any of them waits for a turn up to
`wait_seconds`, then is refused with `too_many_extractions` (429, `Retry-After`). Accounts
are named by their audit actor (`user:<name>`, `admin`), so an account's keys and browser
session share one allowance.

`read` is for async code (the routes); `read_blocking` for the CLI and direct callers of
`KnowledgeService.add` with a file's bytes — and refuses to run in a database thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import anyio.to_thread

from webui.blocking import in_worker_thread
from webui.bounded_child import Bounds, ChildFailed, RunAs, run_child, run_child_blocking
from webui.errors import KnowledgeRefused, TooManyExtractions
from webui.knowledge.extract import kind_of, text_file

log = logging.getLogger(__name__)

TARGET = "webui.knowledge.extract:extract_child"
HEAD_BYTES = 64 * 1024  # the child's answer besides the text: a JSON line (a title, a refusal)
KIND_NAMES = {"html": "HTML file", "pdf": "PDF", "docx": ".docx document"}


@dataclass(frozen=True)
class FileText:
    """A file's text, ready to add: its name (the document's source) and a title found in it."""

    name: str
    text: str
    title: str | None


@dataclass(frozen=True)
class ReadLimits:
    """How files are parsed: each child's wall-clock time and address space; how many at once,
    per account and in all; how long a file past those waits for its turn."""

    seconds: float = 30.0
    memory_bytes: int = 1024 * 1024 * 1024
    per_account: int = 2
    total: int = 4
    wait_seconds: float = 10.0


class FileReader:
    """Reads files of at most `max_file_bytes` into texts of at most `max_text_bytes`."""

    def __init__(
        self,
        limits: ReadLimits | None = None,
        *,
        max_file_bytes: int,
        max_text_bytes: int,
        run_as: RunAs | None = None,
    ) -> None:
        self.limits = limits or ReadLimits()
        self.max_file_bytes = max_file_bytes
        self.max_text_bytes = max_text_bytes
        self.run_as = run_as
        self._turns = _Turns(self.limits.per_account, self.limits.total)

    def reading(self, account: str | None = None) -> int:
        """Files being parsed now: `account`'s, or the server's."""
        return self._turns.held(account)

    @property
    def bounds(self) -> Bounds:
        return Bounds(
            seconds=self.limits.seconds,
            address_space_bytes=self.limits.memory_bytes,
            output_bytes=self.max_text_bytes + HEAD_BYTES,
        )

    async def read(self, name: str, data: bytes, *, account: str) -> FileText:
        """The file's text, parsed in a bounded child during one of `account`'s turns; the
        event loop only waits."""
        kind = self._check(name, data)
        if kind not in KIND_NAMES:
            text, title = await anyio.to_thread.run_sync(text_file, name, data)
            return FileText(name, text, title)
        async with self._turns.turn(account, self.limits.wait_seconds):
            try:
                answer = await run_child(TARGET, self._payload(name, data), self.bounds, run_as=self.run_as)
            except ChildFailed as exc:
                raise self._refusal(name, kind, exc) from None
        return self._parse(name, answer)

    def read_blocking(self, name: str, data: bytes) -> FileText:
        """`read` for code that may wait in its thread (the CLI, tests): no turns (one caller
        at a time). Never in a `run_db` thread: a file is read before the database work."""
        if in_worker_thread():
            raise RuntimeError("a file is read before its database work (FileReader.read), not in run_db")
        kind = self._check(name, data)
        if kind not in KIND_NAMES:
            return FileText(name, *text_file(name, data))
        try:
            answer = run_child_blocking(TARGET, self._payload(name, data), self.bounds, run_as=self.run_as)
        except ChildFailed as exc:
            raise self._refusal(name, kind, exc) from None
        return self._parse(name, answer)

    def _check(self, name: str, data: bytes) -> str:
        if len(data) > self.max_file_bytes:
            raise KnowledgeRefused(f"{name}: larger than {self.max_file_bytes} bytes")
        return kind_of(name)

    def _payload(self, name: str, data: bytes) -> bytes:
        return json.dumps({"name": name, "maxTextBytes": self.max_text_bytes}).encode() + b"\n" + data

    def _parse(self, name: str, answer: bytes) -> FileText:
        head, _, body = answer.partition(b"\n")
        said = json.loads(head)
        if "refused" in said:
            raise KnowledgeRefused(str(said["refused"]))
        title = said.get("title")
        return FileText(name, body.decode("utf-8"), title if isinstance(title, str) else None)

    def _refusal(self, name: str, kind: str, exc: ChildFailed) -> KnowledgeRefused:
        what = KIND_NAMES[kind]
        if exc.reason == "time":
            return KnowledgeRefused(f"{name}: the {what} could not be read within {self.limits.seconds:g} s")
        if exc.reason == "memory":
            mib = self.limits.memory_bytes // (1024 * 1024)
            return KnowledgeRefused(f"{name}: reading the {what} needs more than {mib} MiB of memory")
        if exc.reason == "output":
            return KnowledgeRefused(f"{name}: its text is larger than {self.max_text_bytes} bytes")
        log.warning("reading %s failed in its child process: %s", name, exc.detail)
        return KnowledgeRefused(f"{name}: the {what} could not be read")


class _Turns:
    """Files being parsed, per account and in all (one event loop's; no locking needed)."""

    def __init__(self, per_account: int, total: int) -> None:
        self.per_account = per_account
        self.total = total
        self._held: dict[str, int] = {}
        self._all = 0
        self._freed: anyio.Event | None = None  # while someone waits

    def held(self, account: str | None) -> int:
        return self._all if account is None else self._held.get(account, 0)

    def _refusal(self, account: str) -> TooManyExtractions | None:
        held = self._held.get(account, 0)
        if held >= self.per_account:
            return TooManyExtractions(
                f"this account already has {self.per_account} files being read (the limit per account);"
                " try again when one is done"
            )
        if self._all >= self.total:
            return TooManyExtractions(
                f"the server is already reading {self.total} files (its limit); try again shortly"
            )
        reserved = reserved_turns(self.total)
        if held and self._all >= self.total - reserved:
            return TooManyExtractions(
                f"the server's last {reserved} of {self.total} turns to read a file are kept for"
                f" accounts with none being read, and this account has {held}; try again when one is done"
            )
        return None

    @contextlib.asynccontextmanager
    async def turn(self, account: str, wait: float) -> AsyncIterator[None]:
        with anyio.move_on_after(wait):
            while self._refusal(account) is not None:
                if self._freed is None:
                    self._freed = anyio.Event()
                await self._freed.wait()
        refused = self._refusal(account)
        if refused is not None:
            raise refused
        self._held[account] = self._held.get(account, 0) + 1
        self._all += 1
        try:
            yield
        finally:
            self._all -= 1
            left = self._held[account] - 1
            if left:
                self._held[account] = left
            else:
                del self._held[account]
            freed, self._freed = self._freed, None
            if freed is not None:
                freed.set()


def reserved_turns(total: int) -> int:
    """How many of the server's `total` turns to read a file are kept for accounts with no
    file being read (one each): a quarter, and at least one when there are two or more."""
    return max(total // 4, 1) if total >= 2 else 0
