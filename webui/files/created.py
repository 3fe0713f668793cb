"""The created-files folder: where the files a run makes with `ctx.files.create` are kept.

One subfolder per project and one per file (`<folder>/<project id>/<file id>/<name>`), so a
file keeps the name its handler gave it and two files of the same name never meet. The
server (never the worker) writes there; a worker stages its bytes in its own scratch
directory and the file store copies them in, within the project's quota.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from webui.errors import ConfigError

# Bytes of a file name on disk; most filesystems allow 255.
NAME_BYTES = 200
# How an error names the folder when no command-line option set it.
SETTING = "STEAMHARNESS_FILE_CREATE_STORE_DIR"


def prepare_dir(path: Path, label: str) -> Path:
    """The folder, created if missing (owner-only), checked to be an absolute, writable
    folder; `ConfigError` naming `label` otherwise."""
    if not path.is_absolute():
        raise ConfigError(f"{label} must be an absolute path, got {str(path)!r}")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{label}: {path} is not a folder") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot create {path}: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise ConfigError(f"{label}: {path} is not a folder")
    try:
        # Tried rather than asked (os.access): the answer for root or on a read-only mount.
        fd, probe = tempfile.mkstemp(prefix=".writable-", dir=path)
    except OSError as exc:
        raise ConfigError(f"{label}: {path} is not writable: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)
    return path


def disk_name(name: str) -> str:
    """A sanitized display name cut to NAME_BYTES of UTF-8, keeping a short extension."""
    if len(name.encode()) <= NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext.encode()) > 16:
        stem, ext = name, ""
    suffix = f".{ext}" if ext else ""
    room = NAME_BYTES - len(suffix.encode())
    return stem.encode()[:room].decode("utf-8", "ignore") + suffix


def created_path(root: Path, project_id: str, file_id: str, name: str) -> Path:
    """Where one created file goes; its folder is made here (owner-only)."""
    for part in (project_id, file_id):
        if part in ("", ".", "..") or os.sep in part or (os.altsep and os.altsep in part):
            raise ValueError(f"not a single path component: {part!r}")
    project_dir = root / project_id
    project_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = project_dir / file_id
    folder.mkdir(mode=0o700)  # a fresh id: never an existing folder
    return folder / disk_name(name)
