"""Secrets given on the command line, hidden from `/proc/<pid>/cmdline`.

Any process on the machine, workflow code under its run's uid included, reads every
process's command line: `ps`, `/proc/<pid>/cmdline` (unlike `environ`, not guarded by the
process being non-dumpable). A password in `--database-url` would be handed to every run.
`hide_in_cmdline` overwrites it, where the kernel reads the command line from (the
process's own argument memory, through `/proc/self/mem`), with `*`s. Linux only; elsewhere,
or when the memory cannot be written, it reports False and the caller warns.
"""

from __future__ import annotations

import os


def _argument_area() -> tuple[int, int] | None:
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces or parentheses): arg_start and
    # arg_end are fields 48 and 49 of the whole line.
    rest = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(rest[45]), int(rest[46])
    except (IndexError, ValueError):
        return None


def hide_in_cmdline(secret: str) -> bool:
    """Overwrites every occurrence of `secret` in this process's command line; True when
    none is left there."""
    needle = secret.encode()
    if not needle:
        return True
    area = _argument_area()
    if area is None:
        return False
    start, end = area
    try:
        fd = os.open("/proc/self/mem", os.O_RDWR)
    except OSError:
        return False
    try:
        raw = os.pread(fd, end - start, start)
        found = raw.find(needle)
        while found != -1:
            os.pwrite(fd, b"*" * len(needle), start + found)
            found = raw.find(needle, found + len(needle))
        return needle not in os.pread(fd, end - start, start)
    except OSError:
        return False
    finally:
        os.close(fd)
