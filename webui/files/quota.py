"""Per-project ceilings on stored files: total bytes and number of files.

A file counts once it has its metadata row. Room is reserved before any byte is written
and released once the row exists (or the store gave up), and every check adds the room
other stores of the same project hold right now: two uploads racing for the last room
cannot both get it. Reservations live in this process; several replicas sharing one
database can together overshoot by at most what they have in flight.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from webui.errors import InvalidArguments
from webui.store.files import usage as stored_usage

MB = 1024 * 1024


class ProjectQuotaExceeded(InvalidArguments):
    """Storing this file would take the project past its file quota; nothing was stored."""

    code = "project_quota"
    status = 413  # the request cannot be stored as sent; a 5xx would invite blind retries

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


def _size(n: int) -> str:
    return f"{n / 1024**3:.3g} GiB" if n >= 1024**3 else f"{n / MB:.3g} MB"


@dataclass
class Reservation:
    book: QuotaBook
    project_id: str
    nbytes: int
    released: bool = False

    def release(self) -> None:
        self.book.release(self)


class QuotaBook:
    def __init__(self, engine: Engine, *, max_bytes: int, max_files: int) -> None:
        self.engine = engine
        self.max_bytes = max_bytes
        self.max_files = max_files
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, int]] = {}

    def reserve(self, project_id: str, nbytes: int, *, size_known: bool = True) -> Reservation:
        """Room for one more file of up to `nbytes`, or `ProjectQuotaExceeded`.

        Blocking (one aggregate query): call it from a worker thread in async code.
        """
        with self._lock:
            used_bytes, used_files = stored_usage(self.engine, project_id=project_id)
            held_bytes, held_files = self._pending.get(project_id, (0, 0))
            if used_files + held_files + 1 > self.max_files:
                raise ProjectQuotaExceeded(
                    f"the project already stores {used_files} files"
                    + (f" (and {held_files} more are being stored)" if held_files else "")
                    + f"; its quota is {self.max_files} files. Nothing was stored.",
                    limit="files",
                )
            free = self.max_bytes - used_bytes - held_bytes
            if nbytes > free:
                need = (
                    f"this file needs {_size(nbytes)}"
                    if size_known
                    else f"an upload without Content-Length needs room for the {_size(nbytes)} maximum"
                    " (send Content-Length to reserve only its real size)"
                )
                raise ProjectQuotaExceeded(
                    f"the project's file quota is {_size(self.max_bytes)} and {_size(max(free, 0))}"
                    f" of it is free; {need}. Nothing was stored.",
                    limit="bytes",
                )
            self._pending[project_id] = (held_bytes + nbytes, held_files + 1)
        return Reservation(self, project_id, nbytes)

    def release(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation.released:
                return
            reservation.released = True
            held_bytes, held_files = self._pending.pop(reservation.project_id, (0, 0))
            left = (held_bytes - reservation.nbytes, held_files - 1)
            if left[1] > 0:
                self._pending[reservation.project_id] = left
