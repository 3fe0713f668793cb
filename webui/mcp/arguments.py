"""A tool call's arguments as a run takes them: file params resolved to managed files.

Over HTTP a file param names a managed file by id (of this project, uploaded to the
server); over stdio it is an absolute path on the client's machine, checked and imported
into the managed store. The worker gets each file's view (`{"$file": …}`), the run's
stored params only its id and name. Problems are InvalidArguments (to the client a tool
error result naming the param, `webui.mcp.results.argument_error_result`).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from webui.errors import InvalidArguments
from webui.files.store import FileStore, worker_view
from webui.mcp.binding import Binding
from webui.store.models import ManagedFile
from webui.validation import clipped
from webui.workflows.params import Param
from webui.workflows.project import Entrypoint

URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
BASE64_RE = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def resolve_files(
    files: FileStore, b: Binding, ep: Entrypoint, args: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the worker gets, what the run stores) for checked arguments; blocking."""
    worker = dict(args)
    stored = dict(args)
    for param in ep.params:
        if param.type != "file" or param.name not in args:
            continue
        value = args[param.name]
        values = value if isinstance(value, list) else [value]
        rows = [_file_row(files, b, ep, param, v) for v in values]
        views = [{"$file": worker_view(r)} for r in rows]
        ids = [{"id": r.id, "name": r.name} for r in rows]
        worker[param.name] = views if isinstance(value, list) else views[0]
        stored[param.name] = ids if isinstance(value, list) else ids[0]
    return worker, stored


def _file_row(files: FileStore, b: Binding, ep: Entrypoint, param: Param, value: Any) -> ManagedFile:
    prefix = f"Invalid arguments for tool '{ep.id}': param '{param.name}'"
    project_id = b.catalog.project.id
    if b.catalog.file_mode == "server":
        file_id = value.get("id") if isinstance(value, dict) else None
        row = files.get(str(file_id)) if file_id else None
        if row is None or row.project_id != project_id or row.origin == "local-import":
            raise InvalidArguments(f"{prefix}: unknown file id {clipped(repr(file_id))} for this project")
        return row
    path = _check_local_path(prefix, value, files.max_bytes)
    return files.import_path(project_id=project_id, path=path)


def _check_local_path(prefix: str, value: Any, max_bytes: int) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArguments(f"{prefix}: expected an absolute path to a local file")
    if value.startswith("data:"):
        raise InvalidArguments(f"{prefix}: Base64/data: content is not accepted; pass an absolute file path")
    if URL_RE.match(value):
        raise InvalidArguments(f"{prefix}: URLs are not accepted; pass an absolute file path")
    if not value.startswith("/"):
        if BASE64_RE.fullmatch(value):
            raise InvalidArguments(f"{prefix}: Base64 content is not accepted; pass an absolute file path")
        raise InvalidArguments(f"{prefix}: relative paths are not accepted; pass an absolute file path")
    path = Path(value)
    shown = clipped(value)  # a path names the file; a huge one is not echoed whole
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InvalidArguments(f"{prefix}: no such file: {shown}") from None
    except OSError as exc:
        raise InvalidArguments(f"{prefix}: cannot read {shown}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArguments(f"{prefix}: {shown} is not a regular file")
    if st.st_size > max_bytes:
        raise InvalidArguments(f"{prefix}: {shown} is larger than the {max_bytes // (1024 * 1024)} MB limit")
    if not os.access(path, os.R_OK):
        raise InvalidArguments(f"{prefix}: {shown} is not readable")
    return path
