"""The names MCP clients build from a server's name and its tools' names, and the limits they
put on them: the one home of those rules. The MCP page's client set-ups name the server with
`short_server_name` (a short name made of the project's name) wherever a client puts the
server's name into each tool's name; the page, `projects add` and `projects publish` warn of each tool that
cannot fit a known client's limit even so (`name_problems`).

Only limits with a public source are here (each cites it); a client missing from the list is
one whose rule is not known, not one without a rule. The server's own name (`serverInfo`,
the generic configuration) stays `workflow-<package.json id>`.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

# A short name is at most this long: with it, Claude Code leaves 64 - 7 - 20 = 37 characters
# for a tool's name and Cursor 59 - 20 = 39.
MAX_SHORT_NAME: Final = 20
# Only this much of a project's name is looked at (a name may be any length).
NAME_SCAN: Final = 200
SHORT_NAME_CHARACTERS: Final = frozenset(string.ascii_lowercase + string.digits + "-")
FUNCTION_CHARACTERS: Final = frozenset(string.ascii_letters + string.digits + "_-")


def short_server_name(name: str, project_id: str) -> str:
    """The server's short name for client set-ups: the project's name in lower case with accents
    dropped, each run of other characters one `-`, at most `MAX_SHORT_NAME` characters of
    `a-z 0-9 -`, never starting or ending with `-`; `workflow-` and the id's first 8 characters
    when nothing of the name is left (an empty, all-symbol or all non-Latin name)."""
    folded = unicodedata.normalize("NFKD", name[:NAME_SCAN]).lower()
    short = _slug(folded)[:MAX_SHORT_NAME].strip("-")
    if short:
        return short
    prefix = "".join(c for c in project_id.lower() if c in SHORT_NAME_CHARACTERS and c != "-")[:8]
    return f"workflow-{prefix}" if prefix else "workflow"


def _slug(text: str) -> str:
    parts: list[str] = []
    gap = False
    for c in text:
        if c in SHORT_NAME_CHARACTERS and c != "-":
            if gap and parts:
                parts.append("-")
            parts.append(c)
            gap = False
        elif unicodedata.combining(c):
            continue  # an accent NFKD took off its letter
        else:
            gap = True
    return "".join(parts)


@dataclass(frozen=True)
class ClientLimit:
    """One client's rule for the name it builds from a short name and a tool name."""

    client: str  # the client's name as the page and the CLI show it
    shown: Callable[[str, str], str]  # (short, tool) -> the name as the client builds it
    counted: Callable[[str, str], int]  # (short, tool) -> the length the client checks
    most: int  # the longest length the client takes
    rule: str  # the rule in words
    source: str  # where the rule is stated
    charset: frozenset[str] | None = None  # the only characters the client takes, if any

    def problem(self, short: str, tool: str) -> NameProblem | None:
        shown, length = self.shown(short, tool), self.counted(short, tool)
        if length <= self.most and (self.charset is None or set(shown) <= self.charset):
            return None
        return NameProblem(self.client, tool, shown, length, self.rule)


@dataclass(frozen=True)
class NameProblem:
    """A tool a client cannot use under the given short name."""

    client: str
    tool: str
    name: str  # the name as the client builds it
    length: int
    rule: str

    def text(self) -> str:
        """One line, the same on the MCP page and in the CLI (which makes it terminal-safe)."""
        return (
            f"{self.client}: tool {self.tool} cannot be used: it becomes {self.name}, "
            f"{self.length} characters ({self.rule})"
        )


CLIENT_LIMITS: Final[tuple[ClientLimit, ...]] = (
    # Claude Code names a tool `mcp__<server>__<tool>`, and the name may have at most 64
    # characters: https://github.com/anthropics/claude-code/issues/22276 (and
    # https://github.com/anthropics/claude-code/issues/2412: "String should have at most 64
    # characters"). Its server names are letters, digits, `-` and `_` only
    # (https://github.com/praha-inc/byethrow/issues/319): `short_server_name` gives just those.
    ClientLimit(
        client="Claude Code",
        shown=lambda short, tool: f"mcp__{short}__{tool}",
        counted=lambda short, tool: len(f"mcp__{short}__{tool}"),
        most=64,
        rule="Claude Code takes at most 64",
        source="https://github.com/anthropics/claude-code/issues/22276",
    ),
    # Cursor filters out a tool whose server and tool names are 60 characters or more
    # together ("Combined server and tool name length (60) exceeds 60 characters" for a
    # 1-character server and a 59-character tool): https://github.com/ComposioHQ/composio/issues/2788
    # (also https://github.com/idosal/git-mcp/issues/31).
    ClientLimit(
        client="Cursor",
        shown=lambda short, tool: f"{short} + {tool}",
        counted=lambda short, tool: len(short) + len(tool),
        most=59,
        rule="Cursor takes fewer than 60 for the server and tool names together",
        source="https://github.com/ComposioHQ/composio/issues/2788",
    ),
    # VS Code (GitHub Copilot) builds `mcp_<server>_<tool>` and shortens it itself
    # (https://github.com/microsoft/vscode/issues/299749), so the short name costs nothing
    # there; the tool's own name goes to models whose function names are 1-64 of
    # `A-Z a-z 0-9 _ -` (OpenAI: https://portkey.ai/error-library/input-validation-error-10046;
    # a dotted name is refused: https://github.com/github/copilot-cli/issues/1879).
    ClientLimit(
        client="VS Code (GitHub Copilot)",
        shown=lambda short, tool: tool,
        counted=lambda short, tool: len(tool),
        most=64,
        rule="function names are at most 64 of A-Z a-z 0-9 _ -",
        source="https://github.com/github/copilot-cli/issues/1879",
        charset=FUNCTION_CHARACTERS,
    ),
)


def name_problems(short: str, tools: Iterable[str]) -> list[NameProblem]:
    """Each (tool, client) pair whose built name breaks the client's limit under the short
    server name `short`, in the tools' order, then `CLIENT_LIMITS`' order."""
    found: list[NameProblem] = []
    for tool in tools:
        for limit in CLIENT_LIMITS:
            problem = limit.problem(short, tool)
            if problem is not None:
                found.append(problem)
    return found
