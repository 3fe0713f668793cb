"""Targets (`draft`, `latest`, `X.Y.Z`) and the draft revision. Pure: no store, no HTTP."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from webui.errors import SteamharnessError

VERSION_RE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", ".mypy_cache", ".pytest_cache"})


class BadTarget(SteamharnessError):
    code = "bad_target"
    status = 400


@dataclass(frozen=True)
class Target:
    kind: str  # draft | latest | version
    version: str | None = None

    @property
    def label(self) -> str:
        return self.version if self.kind == "version" and self.version else self.kind


def parse_target(raw: str | None) -> Target:
    value = (raw or "latest").strip()
    if value in ("draft", "latest"):
        return Target(value)
    if VERSION_RE.match(value):
        return Target("version", value)
    raise BadTarget(f"target must be 'draft', 'latest' or an exact version like 1.2.3, not {value!r}")


def check_version(value: str) -> str:
    if not VERSION_RE.match(value):
        raise BadTarget(f"version must look like 1.2.3, not {value!r}")
    return value


def version_key(value: str) -> tuple[int, int, int]:
    m = VERSION_RE.match(value)
    if not m:
        return (-1, -1, -1)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def project_files(root: Path) -> list[Path]:
    """Every file that makes up a project, in a stable order (caches and VCS left out)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.name.endswith(".pyc"):
                found.append(path)
    return found


class RevisionHasher:
    """Content hash of a project folder; re-reads only files whose size or mtime moved."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[int, int, str]] = {}

    def _file_digest(self, path: Path) -> str:
        st = path.stat()
        cached = self._cache.get(path)
        if cached is not None and cached[:2] == (st.st_size, st.st_mtime_ns):
            return cached[2]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self._cache[path] = (st.st_size, st.st_mtime_ns, digest)
        return digest

    def revision(self, root: Path) -> str:
        total = hashlib.sha256()
        for path in project_files(root):
            rel = path.relative_to(root).as_posix()
            total.update(rel.encode() + b"\0" + self._file_digest(path).encode() + b"\n")
        return "rev-" + total.hexdigest()[:16]
