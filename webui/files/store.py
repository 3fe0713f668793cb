"""Managed-file store: content-addressed blobs on disk plus one metadata row per file.

Blobs are streamed (never held whole in memory) and hashed as they are written; a file
id (`wf_<16 hex>`) names metadata, not content, so two imports of the same bytes share a
blob but keep their own names and projects.
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import re
import secrets
import tempfile
import unicodedata
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

import anyio
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db
from webui.errors import InvalidArguments
from webui.files.created import created_path
from webui.files.quota import ProjectQuotaExceeded, QuotaBook, Reservation
from webui.store import files as file_store
from webui.store.models import ManagedFile
from webui.store.paths import PRIVATE_DIR_MODE, private_folder, resolve, to_stored

CHUNK = 1024 * 1024
UPLOAD_BATCH = 1024 * 1024  # bytes gathered from the network before a thread writes them
FILE_ID_RE = re.compile(r"^wf_[0-9a-f]{16}$")
# `type/subtype`, each an RFC 7230 token (RFC 6838 caps each at 127 characters): no
# parameters, spaces, CR/LF or markup, so the value is safe in a header or a page.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,127}"
MIME_TYPE_RE = re.compile(rf"{_TOKEN}/{_TOKEN}")


def new_file_id() -> str:
    return f"wf_{secrets.token_hex(8)}"


def sanitize_name(name: str) -> str:
    """A display name only: no directories, no control characters, bounded length."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(ch for ch in unicodedata.normalize("NFC", base) if unicodedata.category(ch)[0] != "C")
    base = base.strip().lstrip(".") or "file"
    return base[:200]


class FileTooLarge(InvalidArguments):
    code = "file_too_large"
    status = 413


class InvalidMimeType(InvalidArguments):
    code = "invalid_mime_type"
    status = 400


def check_mime_type(value: str) -> str:
    """A media type as `type/subtype` (lower-cased), or `InvalidMimeType` saying what is wrong."""
    if MIME_TYPE_RE.fullmatch(value) is None:
        # The refused value is not echoed: it may carry markup or line breaks.
        raise InvalidMimeType(
            "mimeType must be a media type like 'application/pdf': type/subtype, each part 1-127"
            " letters, digits or !#$%&'*+.^_`|~- characters, with no parameters, spaces or line breaks"
        )
    return value.lower()


class BlobWriter:
    """One incoming blob: a private temp file, hashed as written, moved into place by
    content hash on commit."""

    def __init__(self, store: FileStore, *, reserved: int | None = None, final: Path | None = None) -> None:
        """`final`: where the file goes instead of the blob store (a created file)."""
        folder = store.blob_dir if final is None else final.parent
        folder.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        self._store = store
        self._reserved = reserved
        self._final = final
        self._digest = hashlib.sha256()
        self.size = 0
        fd, self._tmp = tempfile.mkstemp(prefix=".incoming-", dir=folder)
        self._out = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self._store.max_bytes:
            raise FileTooLarge(f"file is larger than the {self._store.max_bytes // (1024 * 1024)} MB limit")
        if self._reserved is not None and self.size > self._reserved:
            # Longer than declared (or it grew while being copied): more than its quota room.
            raise FileTooLarge(f"the file is longer than the {self._reserved} bytes it declared")
        self._digest.update(chunk)
        self._out.write(chunk)

    def write_all(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def commit(self) -> tuple[Path, str, int]:
        self._out.close()
        sha = self._digest.hexdigest()
        final = self._final or self._store.blob_path(sha)
        final.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        os.replace(self._tmp, final)
        return final, sha, self.size

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._out.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)


class FileStore:
    def __init__(
        self,
        engine: Engine,
        blob_dir: Path,
        *,
        max_bytes: int,
        audit: AuditLog | None = None,
        quota_bytes: int = 5 * 1024**3,
        quota_files: int = 10_000,
        root: Path | None = None,
    ) -> None:
        """`root`: the folder file paths are stored relative to (the shared dir; by default
        the one `blob_dir` is in)."""
        self.engine = engine
        self.root = blob_dir.parent if root is None else root
        self.audit = audit
        # Nobody but the server lists or reads the store (a run gets copies of its own file
        # params); a store made by an older version is tightened here.
        self.blob_dir = private_folder(blob_dir)
        self.max_bytes = max_bytes
        self.quota = QuotaBook(engine, max_bytes=quota_bytes, max_files=quota_files)

    def _reserve(
        self, project_id: str, nbytes: int, *, size_known: bool = True, actor: str | None = None
    ) -> Reservation:
        """Room for one file in the project's quota; a refusal is audited before it is raised."""
        try:
            return self.quota.reserve(project_id, nbytes, size_known=size_known)
        except ProjectQuotaExceeded as exc:
            if self.audit is not None:
                self.audit.record_alone(
                    self.engine,
                    AuditName.FILE_REFUSED,
                    actor=actor,
                    project_id=project_id,
                    outcome=exc.code,
                    details={"limit": exc.limit, "message": exc.message},
                )
            raise

    def blob_path(self, sha: str) -> Path:
        return self.blob_dir / sha[:2] / sha

    def _store_stream(
        self, src: BinaryIO, *, reserved: int | None = None, final: Path | None = None
    ) -> tuple[Path, str, int]:
        """Copy `src` into the blob store (or to `final`), hashing as it goes; refuse past max_bytes."""
        blob = BlobWriter(self, reserved=reserved, final=final)
        try:
            while chunk := src.read(CHUNK):
                blob.write(chunk)
            return blob.commit()
        except BaseException:
            blob.abort()
            raise

    async def store_upload(
        self,
        *,
        project_id: str,
        chunks: AsyncIterator[bytes],
        name: str,
        mime_type: str | None,
        actor: str | None = None,
        declared_size: int | None = None,
    ) -> ManagedFile:
        """A streamed HTTP upload: never whole in memory, nothing left behind on failure.

        Quota room is reserved first: the declared size, or the largest file allowed when
        the size is not known up front. Hashing and writing happen in a thread, a batch of
        chunks at a time."""
        mime = check_mime_type(mime_type) if mime_type is not None else None
        room = declared_size if declared_size is not None else self.max_bytes
        reservation = await run_db(
            lambda: self._reserve(project_id, room, size_known=declared_size is not None, actor=actor)
        )
        try:
            blob = await run_db(BlobWriter, self, reserved=room)
            try:
                batch: list[bytes] = []
                held = 0
                async for chunk in chunks:
                    batch.append(chunk)
                    held += len(chunk)
                    if held >= UPLOAD_BATCH:
                        await run_db(blob.write_all, batch)
                        batch, held = [], 0
                await run_db(blob.write_all, batch)
                path, sha, size = await run_db(blob.commit)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await run_db(blob.abort)
                raise
            clean = sanitize_name(name)
            return await run_db(
                self._record,
                project_id=project_id,
                name=clean,
                mime_type=mime or mimetypes.guess_type(clean)[0] or "application/octet-stream",
                size=size,
                sha256=sha,
                origin="upload",
                storage=str(path),
                uploaded_by=actor,
            )
        finally:
            reservation.release()

    def _record(
        self, *, uploaded_by: str | None = None, file_id: str | None = None, **fields: Any
    ) -> ManagedFile:
        """The metadata row; an upload is audited in the same transaction."""
        fields["storage"] = to_stored(Path(fields["storage"]), self.root)
        row = ManagedFile(id=file_id or new_file_id(), **fields)
        log = self.audit if row.origin == "upload" else None
        if log is None:
            return self._resolved(file_store.add_file(self.engine, row=row))

        def audit(s: Session) -> None:
            log.record(
                s,
                AuditName.FILE_UPLOADED,
                actor=uploaded_by,
                project_id=row.project_id,
                outcome="ok",
                details={"fileId": row.id, "size": row.size},
            )

        return self._resolved(file_store.add_file(self.engine, row=row, audit=audit))

    def _resolved(self, row: ManagedFile) -> ManagedFile:
        """`row` with its storage as the absolute path it names now (rows store it relative)."""
        row.storage = str(resolve(row.storage, self.root))
        return row

    def import_path(self, *, project_id: str, path: Path, origin: str = "local-import") -> ManagedFile:
        reservation = self._reserve(project_id, path.stat().st_size)
        try:
            with path.open("rb") as src:
                blob, sha, size = self._store_stream(src, reserved=reservation.nbytes)
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            return self._record(
                project_id=project_id,
                name=sanitize_name(path.name),
                mime_type=mime,
                size=size,
                sha256=sha,
                origin=origin,
                storage=str(blob),
            )
        finally:
            reservation.release()

    def adopt(
        self,
        *,
        project_id: str,
        src: BinaryIO,
        name: str,
        mime_type: str,
        run_id: str,
        created_dir: Path | None = None,
    ) -> ManagedFile:
        """Take a file a worker wrote (ctx.files.create), opened by the caller, into the store:
        under `created_dir` (see webui.files.created) when given, else as a blob."""
        reservation: Reservation | None = None
        try:
            mime = check_mime_type(mime_type)
            clean = sanitize_name(name)
            reservation = self._reserve(project_id, os.fstat(src.fileno()).st_size)
            file_id = new_file_id()
            final = None if created_dir is None else created_path(created_dir, project_id, file_id, clean)
            try:
                blob, sha, size = self._store_stream(src, reserved=reservation.nbytes, final=final)
                return self._record(
                    file_id=file_id,
                    project_id=project_id,
                    name=clean,
                    mime_type=mime,
                    size=size,
                    sha256=sha,
                    origin="output",
                    storage=str(blob),
                    run_id=run_id,
                )
            except BaseException:
                if final is not None:  # nothing half-made stays in the created-files folder
                    with contextlib.suppress(OSError):
                        final.unlink(missing_ok=True)
                        final.parent.rmdir()
                raise
        finally:
            if reservation is not None:
                reservation.release()

    def outputs_of_run(self, run_id: str) -> list[ManagedFile]:
        return [self._resolved(row) for row in file_store.outputs_of_run(self.engine, run_id=run_id)]

    def get(self, file_id: str) -> ManagedFile | None:
        if not FILE_ID_RE.match(file_id):
            return None
        row = file_store.get_file(self.engine, file_id=file_id)
        return None if row is None else self._resolved(row)


def worker_view(row: ManagedFile) -> dict[str, Any]:
    """How a file travels to a worker (becomes a ctx ManagedFile)."""
    return {"id": row.id, "path": row.storage, "name": row.name, "mime_type": row.mime_type, "size": row.size}


def output_view(row: ManagedFile) -> dict[str, Any]:
    """How a file a run created is named in the run's result; `path` is where it is stored
    (a transport that is not on this machine leaves it out)."""
    return {"id": row.id, "name": row.name, "mimeType": row.mime_type, "size": row.size, "path": row.storage}
