"""Captures: what a run records about a server so it can tell when the configuration moved.

A capture names the server, its source file and the SHA-256 of that whole file, never
values; any edit to the file (even to another server in it) invalidates the capture. The
host takes one from the current configuration for each client it builds, re-checks it just
before building, and stores it on each call row (`HostCall.source`, `source_digest`); work
bound to an older capture is what `check_capture` refuses with `mcp_source_changed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from webui.errors import SteamharnessError
from webui.host.config.files import digest
from webui.host.config.model import ServerConfig


class McpSourceChanged(SteamharnessError):
    """A server's source file changed (or vanished) between capture and client construction."""

    code = "mcp_source_changed"
    status = 409


@dataclass(frozen=True)
class Capture:
    """What a run records about a server: where it came from and the file's digest, no values."""

    server_id: str
    source: Path
    digest: str

    def to_json(self) -> dict[str, str]:
        return {"server_id": self.server_id, "source": str(self.source), "digest": self.digest}

    @classmethod
    def from_json(cls, data: Mapping[str, str]) -> Capture:
        return cls(server_id=data["server_id"], source=Path(data["source"]), digest=data["digest"])


def capture(server: ServerConfig) -> Capture:
    return Capture(server_id=server.id, source=server.source, digest=server.digest)


def check_capture(captured: Capture) -> None:
    """Raise McpSourceChanged unless the captured source file is still byte-for-byte the same."""
    try:
        current = digest(captured.source.read_bytes())
    except OSError:
        current = None
    if current != captured.digest:
        state = "is gone" if current is None else "changed"
        raise McpSourceChanged(
            f"{captured.server_id}: its source {captured.source} {state} since it was captured;"
            " start a new run to use the current configuration"
        )
