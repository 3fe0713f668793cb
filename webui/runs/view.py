"""A run's filesystem view: what of the host's disk its workflow code can reach.

Under a root server, each worker builds a mount namespace of its own while it is a spare
(single-threaded, before any run is known, so off the run's path). Its root is a fresh
tmpfs of `tmpBytes` holding only:

- read-only bind mounts of what the interpreter needs: `/usr`, `/lib*`, `/bin`, `/sbin`
  (or the links to them), the interpreter's prefixes, every folder of its import path and
  the server's own package; a few entries of `/etc` (`SYSTEM_ETC`: the loader's cache,
  certificates, name resolution, time zone, users and groups);
- `/dev` with `null`, `zero`, `full`, `random`, `urandom`; `/proc` (the host's, bound);
- empty `/tmp`, `/var/tmp` and `/dev/shm` (`1777`), sharing the tmpfs's `tmpBytes`;
- the operator's `readPaths`, read-only.

When its run arrives, the worker binds its scratch dir (writable) and its project folder
(read-only; for a draft, the author's folder itself) at their own paths, changes its root
to the view (chroot) and drops to the run's user. That user can neither mount nor change
its root again, and the kernel refuses a chrooted process a user namespace (where it would
have both), so it stays in the view. Every path the run is given keeps its meaning;
walking up from one shows only the names on the way to the others. The host's mounts stay
in the namespace outside the new root, reachable from no path and no descriptor the worker
keeps (no process of the run's uid lives outside it; under a shared worker user, one that
does could be reached through /proc). The namespace, its `/tmp` with it, is gone when the
run's last process is.

The system part is built once, in the zygote's own mount namespace (`View.plan`: every
host path looked up there, each bind made read-only there); a spare copies it (`/etc` in
one copy) into its own tmpfs (`View.prepare`: about a dozen mount calls).

Standard library only: the zygote preloads it with the worker runtime. Linux only; the
zygote `probe`s once whether views can be built (root with CAP_SYS_ADMIN, no seccomp
filter refusing `unshare`/`mount`) and, if not, runs see the host's filesystem, closed
only by modes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import sys
from collections.abc import Iterable
from typing import NamedTuple, TypedDict

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_RELATIME = 1 << 21
# Flags of a mount a remount must keep (in a user namespace they are locked).
_KEPT_FLAGS = (
    (os.ST_NOEXEC, 8),
    (os.ST_NOATIME, 1024),
    (os.ST_NODIRATIME, 2048),
    (os.ST_RELATIME, MS_RELATIME),
)

# Top-level folders of the system's programs and libraries (links, on merged-/usr systems).
SYSTEM_TOP = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What of /etc the interpreter, the C library and common tools read; nothing else of it.
SYSTEM_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "mime.types",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "alternatives",
    "os-release",
    "locale.alias",
    "locale.conf",
    "fonts",
    f"python{sys.version_info.major}",
    f"python{sys.version_info.major}.{sys.version_info.minor}",
)
DEVICES = ("null", "zero", "full", "random", "urandom")
# The run's own temporary folders (in the view's tmpfs, 1777).
TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
# Reached through these, never bound from them: the kernel's own file systems.
_KERNEL = ("/proc", "/sys", "/dev")
# A zygote's probe that takes longer than this is taken as failed (it never should).
PROBE_SECONDS = 10.0


class ViewConfig(TypedDict):
    """What the pool gives the zygote (its second argument, as JSON)."""

    mountpoint: str  # an empty folder the view's tmpfs is mounted on, in each worker's namespace
    template: str  # another: the system part of every view, built once in the zygote's namespace
    tmpBytes: int  # the view's tmpfs: /tmp, /var/tmp and /dev/shm together
    readPaths: list[str]  # the operator's folders every run reads


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    result = _lib().mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))
    _check(result, f"mount {source or fstype or ''} on {target}")


def _kept_flags(path: str) -> int:
    """The flags of the mount `path` is on that a remount of a bind of it must keep."""
    kept = os.statvfs(path).f_flag
    return sum(ms_flag for st_flag, ms_flag in _KEPT_FLAGS if kept & st_flag)


class Step(NamedTuple):
    """One step of building a tree of mounts, at `path` inside it: "dir" (`arg`: its mode),
    "link" (`arg`: its target), "file" (a mount point for a file), "rbind" (the host's
    `path`, with every mount under it), "bind" (the host's `path` alone), "remount" (the
    bind at `path` with the flags `arg`), "copy" (the template's `path`, as it is)."""

    kind: str
    path: str
    arg: int | str | None = None


class View:
    """A tree of mounts at `root`: host paths shown at their own paths, and the folders
    and links on the way to them. Built at once, or planned (its steps recorded) and
    built later by `prepare`."""

    def __init__(self, root: str, *, size: int = 0, template: str | None = None) -> None:
        self.root = root
        self.size = size  # of the tmpfs a planned view is built on
        self.template = template  # where the trees it copies from are
        self._steps: list[Step] | None = [] if template is not None else None
        self.taken: list[Step] = []  # every step so far, built or recorded
        self._made: set[str] = set()  # folders and links of its own tmpfs
        self._bound: set[str] = set()  # real host paths shown as they are

    # ----------------------------------------------------------------- planning

    @classmethod
    def plan(cls, config: ViewConfig) -> View:
        """In the zygote, as root: this process in a mount namespace of its own (a slave of
        the host's: mounts made on the host still reach it, none of its own leave it),
        with the system part of every view built read-only at `config["template"]`.
        Returns the view each spare builds from it (`prepare`). Raises OSError."""
        _check(_lib().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        mount(None, "/", None, MS_REC | MS_SLAVE)
        system = cls(config["template"])
        mount("tmpfs", system.root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=755")
        for name in SYSTEM_TOP:
            system.bind(f"/{name}")
        for path in interpreter_paths():
            system.bind(path)
        for name in SYSTEM_ETC:
            system.bind(f"/etc/{name}")
        for path in config.get("readPaths") or []:
            system.bind(path)
        mount(None, system.root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)

        view = cls(config["mountpoint"], size=int(config["tmpBytes"]), template=system.root)
        for path in TEMP_FOLDERS:  # first: a bind below one must not make it 0755
            view.folder(path, 0o1777)
        view.folder("/proc")
        # The system part: what was built in the template, each bind copied as it is (read
        # only already), and /etc whole (its entries: one copy instead of one each).
        for step in system.taken:
            if _under(step.path, "/etc"):
                continue
            if step.kind == "dir":
                view.folder(step.path)
            elif step.kind == "link":
                view._link(step.path, str(step.arg))
            elif step.kind == "file":
                view._step(step)
            elif step.kind == "rbind":
                view._step(Step("copy", step.path))
        if "/etc" in system._made:
            view.folder("/etc")
            view._step(Step("copy", "/etc"))
        view._bound |= system._bound
        view.folder("/dev")
        for name in DEVICES:
            view._step(Step("file", f"/dev/{name}"))
            view._step(Step("bind", f"/dev/{name}"))
        for fd, name in enumerate(("stdin", "stdout", "stderr")):
            view._link(f"/dev/{name}", f"/proc/self/fd/{fd}")
        view._link("/dev/fd", "/proc/self/fd")
        view._step(Step("rbind", "/proc"))
        return view

    def _step(self, step: Step) -> None:
        self.taken.append(step)
        if self._steps is not None:
            self._steps.append(step)
        else:
            self._take(step)

    def _inside(self, path: str) -> str:
        return self.root + path

    def _covered(self, path: str) -> bool:
        """Whether `path` is shown by a bind (so it is there as on the host)."""
        while True:
            if path in self._bound:
                return True
            if path == "/":
                return False
            path = os.path.dirname(path)

    def folder(self, path: str, mode: int = 0o755) -> None:
        """`path` (absolute) a folder of the view, its parents too (each root's, `0755`:
        the run can list them, not change them), unless a bind already shows it."""
        current = ""
        parts = [p for p in path.split("/") if p]
        for index, name in enumerate(parts):
            current += "/" + name
            if current in self._made:
                continue
            if self._covered(current):
                return
            self._made.add(current)
            self._step(Step("dir", current, mode if index == len(parts) - 1 else 0o755))

    def _link(self, path: str, target: str) -> None:
        if path not in self._made:
            self.folder(os.path.dirname(path))
            self._made.add(path)
            self._step(Step("link", path, target))

    def _spell(self, path: str, depth: int = 0) -> str:
        """Every link on the way to `path` a link in the view too (so `path` names in the
        view what it names on the host); returns the real path it names."""
        parts = [p for p in path.split("/") if p]
        current = ""
        for index, name in enumerate(parts):
            step = current + "/" + name
            if self._covered(step):  # a bind shows the rest as it is, links included
                return os.path.realpath(path)
            if os.path.islink(step):
                if depth > 40:
                    raise OSError(errno.ELOOP, f"{path}: too many links")
                self._link(step, os.readlink(step))
                rest = os.path.join(os.path.realpath(step), *parts[index + 1 :])
                return self._spell(rest, depth + 1)
            current = step
        return current or "/"

    def bind(self, path: str, *, writable: bool = False) -> None:
        """Show the host's `path` at its own path in the view (read-only unless `writable`);
        nothing if it does not exist, or is a kernel file system's."""
        if not os.path.isabs(path) or not os.path.lexists(path):
            return
        real = self._spell(os.path.normpath(path))
        if real == "/" or any(_under(real, k) for k in _KERNEL):
            return
        if not os.path.exists(real) or (self._covered(real) and not writable):
            return
        if os.path.isdir(real):
            self.folder(real)
        else:
            self.folder(os.path.dirname(real))
            self._step(Step("file", real))
        self._step(Step("rbind", real))
        flags = MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY) | _kept_flags(real)
        self._step(Step("remount", real, flags))
        self._bound.add(real)

    # ----------------------------------------------------------------- building

    def _take(self, step: Step) -> None:
        target = self._inside(step.path)
        if step.kind == "dir":
            os.mkdir(target)
            os.chmod(target, int(step.arg or 0o755))  # not left to the umask
        elif step.kind == "link":
            os.symlink(str(step.arg), target)
        elif step.kind == "file":
            with contextlib.suppress(FileExistsError):  # a bind's own mount point
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        elif step.kind == "rbind":
            mount(step.path, target, None, MS_BIND | MS_REC)
        elif step.kind == "bind":
            mount(step.path, target, None, MS_BIND)
        elif step.kind == "copy":
            assert self.template is not None
            mount(self.template + step.path, target, None, MS_BIND | MS_REC)
        else:  # "remount": the bind above, with its own flags
            mount(None, target, None, MS_BIND | MS_REMOUNT | int(step.arg or 0))

    def prepare(self) -> View:
        """This process in a mount namespace of its own (private: nothing mounted here
        reaches another), the planned view built in it, not entered yet. Call it as root,
        single-threaded (a thread started before keeps the zygote's namespace), in the
        process that will enter it. Raises OSError."""
        assert self._steps is not None, "a planned view is built once"
        _check(_lib().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        data = f"size={self.size},nr_inodes={1024 + self.size // 8192},mode=755"
        mount("tmpfs", self.root, "tmpfs", MS_NOSUID | MS_NODEV, data)
        steps, self._steps = self._steps, None
        for step in steps:
            try:
                self._take(step)
            except FileNotFoundError:
                # A device the host no longer has: not shown, as if never there.
                if step.kind != "bind":
                    raise
        return self

    def enter(self, *, project: str | None, scratch: str | None, shared: Iterable[str] = ()) -> None:
        """The run's own folders in, then this process's root (every thread's) the view's."""
        if scratch is not None:
            self.bind(scratch, writable=True)
        if project is not None:
            self.bind(project)
        for path in shared:
            self.bind(path)
        os.chdir(self.root)
        os.chroot(".")
        os.chdir("/")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def interpreter_paths() -> list[str]:
    """What this interpreter reads after a fork and what its handlers import from: its
    prefixes, its executable's folder, every folder of its import path, the server's package."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, package]
    if sys.executable:
        found.append(os.path.dirname(os.path.abspath(sys.executable)))
        found.append(os.path.dirname(os.path.realpath(sys.executable)))
    found += [entry for entry in sys.path if entry and os.path.isabs(entry)]
    return found


def probe(plan: View) -> str | None:
    """Whether `plan` can be built and entered here: tried in a child process (the
    namespace is its own, and so is the root it enters). None, or why not."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's outcome is reported through the pipe
        code = 0
        try:
            os.close(r)
            plan.prepare().enter(project=None, scratch=None)
            if sys.executable and not os.path.exists(sys.executable):
                raise OSError(errno.ENOENT, f"the interpreter {sys.executable} is not in the view")
        except BaseException as exc:
            os.write(w, str(exc).encode("utf-8", "replace")[:1000])
            code = 1
        os._exit(code)
    os.close(w)
    problem = b""
    try:
        ready, _, _ = select.select([r], [], [], PROBE_SECONDS)
        if ready:
            while chunk := os.read(r, 4096):
                problem += chunk
        else:
            os.kill(pid, 9)
            problem = b"building it did not end in time"
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if problem or os.waitstatus_to_exitcode(status) != 0:
        return problem.decode("utf-8", "replace") or "the probe failed"
    return None
