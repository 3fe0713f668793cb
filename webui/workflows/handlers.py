"""Every entrypoint's handler checked before any run: its file imports, the function is in
it, and it can be called as a run calls it (`handler(ctx)`, webui.runs.child: one positional
argument, a plain function whose return value is the result).

Importing a handler runs the project's code, which is hostile: the import happens only in
a bounded child process (webui.bounded_child: address space, CPU and wall-clock bounds, none
of the server's environment, as `run_as`, the worker user, when the server is root), never
in the server or the CLI itself. The child may create no process or thread (RLIMIT_NPROC 0:
a fork at import fails there), its stdout and stderr go nowhere while project code runs, and
it stops importing at its own deadline, a little before the parent kills it, so a file that
never finishes importing is named. What it tells back is bounded JSON; every text of the
project's in a problem (an exception's message) is cut to one short line.

Problems are `<file>:<line>: <problem>` lines: the handler file and the line of its `def`
(or the line an import failed at) where the AST or the traceback gives one, else the
package.json line of the entrypoint's `"handler"`.

The child imports this module and nothing of the server: the standard library and
webui.bounded_child and webui.terminal_text, which import nothing else.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webui.bounded_child import Bounds, ChildFailed, RunAs, run_child, run_child_blocking
from webui.terminal_text import terminal_safe

TARGET = f"{__name__}:check_child"
MESSAGE_CHARS = 200  # of a project's own text (an exception's message) in a problem
MAX_FILES = 200  # handler files checked in one project; more are not (a project has a few)
OUTPUT_BYTES = 256 * 1024
# The variables that keep numeric libraries to one thread (the child may start none).
ONE_THREAD = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


@dataclass(frozen=True)
class CheckBounds:
    """The child's bounds (`STEAMHARNESS_HANDLER_CHECK_SECONDS`, `..._MEMORY_BYTES`) and,
    when the server or CLI runs as root, the user it imports the handlers as."""

    seconds: float = 30.0
    memory_bytes: int = 2 * 1024**3
    run_as: RunAs | None = None

    def child_bounds(self) -> Bounds:
        return Bounds(seconds=self.seconds, address_space_bytes=self.memory_bytes, output_bytes=OUTPUT_BYTES)


# ----------------------------------------------------------------------------- the parent


@dataclass(frozen=True)
class HandlerRef:
    """One entrypoint's `"handler"` as package.json names it, and where."""

    entrypoint: str  # its id, or `entrypoints[i]` when the id is wrong
    handler: str
    where: str  # `<package.json>:<line>: entrypoints[i].handler`

    @property
    def file(self) -> str:
        return self.handler.rpartition(":")[0]

    @property
    def function(self) -> str:
        return self.handler.rpartition(":")[2]


def _payload(root: Path, refs: Sequence[HandlerRef], bounds: CheckBounds) -> bytes:
    files: dict[str, dict[str, None]] = {}  # each file's functions, in order, once each
    for ref in refs:
        if ref.file not in files and len(files) >= MAX_FILES:
            continue
        files.setdefault(ref.file, {})[ref.function] = None
    # The child stops importing at its own deadline, before the parent's kill: it can then
    # say which file did not finish.
    deadline = max(0.1, bounds.seconds * 0.8 - 0.2)
    listed = {file: list(functions) for file, functions in files.items()}
    return json.dumps({"root": str(root), "deadline": deadline, "files": listed}).encode()


def check_handlers(
    root: Path, refs: Sequence[HandlerRef], bounds: CheckBounds, *, shown_root: Path | None = None
) -> list[str]:
    """The problems of `refs`' handlers in the project folder `root` (empty: all can be
    called as runs call them); waits in this thread for the bounded child. `shown_root`: the
    folder problems name instead of `root` (a publish checks a copy of the draft)."""
    if not refs:
        return []
    try:
        out = run_child_blocking(
            TARGET, _payload(root, refs, bounds), bounds.child_bounds(), run_as=bounds.run_as, cwd=root
        )
    except ChildFailed as exc:
        return [_child_failed(exc, shown_root or root, refs, bounds)]
    return judge(out, refs, root, shown_root)


async def check_handlers_async(
    root: Path, refs: Sequence[HandlerRef], bounds: CheckBounds, *, shown_root: Path | None = None
) -> list[str]:
    """`check_handlers` for async code: the event loop waits on the child's pipes."""
    if not refs:
        return []
    try:
        out = await run_child(
            TARGET, _payload(root, refs, bounds), bounds.child_bounds(), run_as=bounds.run_as, cwd=root
        )
    except ChildFailed as exc:
        return [_child_failed(exc, shown_root or root, refs, bounds)]
    return judge(out, refs, root, shown_root)


def _child_failed(exc: ChildFailed, root: Path, refs: Sequence[HandlerRef], bounds: CheckBounds) -> str:
    files = one_line(", ".join(dict.fromkeys(ref.file for ref in refs)), 400)
    if exc.reason == "time":
        why = f"importing them took over {bounds.seconds:g} s (STEAMHARNESS_HANDLER_CHECK_SECONDS)"
    elif exc.reason == "memory":
        mib = bounds.memory_bytes // 1024**2
        why = f"importing them needed more than {mib} MiB (STEAMHARNESS_HANDLER_CHECK_MEMORY_BYTES)"
    elif exc.reason == "output":
        why = "importing them wrote more than the check reads"
    else:
        why = f"importing them stopped the check ({one_line(exc.detail or exc.reason)})"
    return f"{root}: the handlers in {files} could not be checked: {why}"


def judge(out: bytes, refs: Sequence[HandlerRef], checked: Path, shown: Path | None = None) -> list[str]:
    """The child's findings as problem lines, in the order of the entrypoints: one per file
    that does not import (naming the entrypoints it serves), one per handler otherwise;
    naming `shown` for the folder `checked`."""
    root = shown or checked
    try:
        found = json.loads(out)
        files: dict[str, Any] = found["files"]
    except (ValueError, TypeError, KeyError):
        return [f"{root}: the handlers could not be checked: the check gave no answer"]
    problems: list[str] = []
    told: set[str] = set()
    for ref in refs:
        result = files.get(ref.file)
        if not isinstance(result, dict):
            continue
        error = result.get("error")
        if isinstance(error, dict):
            if ref.file not in told:
                told.add(ref.file)
                users = one_line(", ".join(r.entrypoint for r in refs if r.file == ref.file), 400)
                where = _at(root, error.get("file") or ref.file, error.get("line"))
                problems.append(
                    f"{where}: importing {one_line(ref.file)} (the handler file of {users}): {_text(error)}"
                )
            continue
        verdict = (result.get("functions") or {}).get(ref.function)
        if not isinstance(verdict, dict) or not verdict.get("problem"):
            continue
        line = verdict.get("line")
        where = _at(root, ref.file, line) if isinstance(line, int) else ref.where
        if shown is not None and where.startswith(f"{checked}/"):
            where = f"{shown}/{where[len(str(checked)) + 1 :]}"
        told_of = f"entrypoint {ref.entrypoint}, handler {ref.handler!r}"
        problems.append(f"{where}: {told_of}: {_text(verdict, 'problem')}")
    return problems


def _at(root: Path, file: Any, line: Any) -> str:
    path = f"{root}/{one_line(str(file))}"
    return f"{path}:{line}" if isinstance(line, int) and line > 0 else path


def _text(found: dict[str, Any], key: str = "message") -> str:
    return one_line(str(found.get(key) or ""), 600)


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A project's text as one short line: line breaks shown as `\\n`, and every character
    a terminal would act on as its escape (`webui.terminal_text`), wherever the line goes
    (a terminal, a log, a client's tool result)."""
    text = text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
    text = str(terminal_safe(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------ the child


class _Deadline(BaseException):
    """The child's own deadline passed while a file was being imported."""


def check_child(payload: bytes) -> bytes:
    """In the bounded child (its working folder the project's): import each handler file
    and look at each function; the findings as JSON."""
    # Every module the check uses, imported before the project's folder is on the path (a
    # project's own `inspect.py` would be imported instead after).
    import ast  # noqa: F401
    import difflib  # noqa: F401
    import importlib.util  # noqa: F401
    import inspect  # noqa: F401
    import resource
    import signal
    import traceback  # noqa: F401

    spec = json.loads(payload)
    root = str(spec["root"])
    # No process or thread of its own from here on (as root's child, `_become` did it already);
    # the numeric libraries that start a pool of threads when imported (OpenBLAS under numpy)
    # are told to use the one they run in, so that importing them is no problem.
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    os.environ.update(dict.fromkeys(ONE_THREAD, "1"))
    # The folder by name, or through the working folder the parent started the child in
    # (a project under a folder only root may enter), held open: project code may move away.
    base = root if os.access(root, os.R_OK | os.X_OK) else f"/proc/self/fd/{os.open('.', os.O_RDONLY)}"
    sys.path.insert(0, base)
    sys.dont_write_bytecode = True
    expired = False

    def expire(signum: int, frame: Any) -> None:
        nonlocal expired
        expired = True
        raise _Deadline

    files: dict[str, Any] = {}
    stdout = os.dup(1)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(spec["deadline"]))
    try:
        for file, functions in spec["files"].items():
            if expired:
                files[file] = {
                    "error": {"message": "not checked: the check's time ran out on an earlier file"}
                }
                continue
            try:
                files[file] = _check_file(base, str(file), [str(f) for f in functions])
            except _Deadline:
                files[file] = {"error": {"message": _TIME_RAN_OUT}}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.dup2(stdout, 1)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 (the child writes its answer through it)
    return json.dumps({"files": files}).encode()


_TIME_RAN_OUT = "it did not finish within the check's time (STEAMHARNESS_HANDLER_CHECK_SECONDS)"


def _check_file(base: str, file: str, functions: list[str]) -> dict[str, Any]:
    import importlib.util

    path = os.path.join(base, file)
    try:
        with open(path, "rb") as handle:
            source = handle.read()
    except OSError as exc:
        return {"error": {"message": f"cannot be read: {exc.strerror or exc}"}}
    defined = _top_level_defs(source)
    name = "workflow_handler_" + "".join(c if c.isalnum() else "_" for c in Path(file).stem)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            return {"error": {"message": "cannot be imported"}}
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    except _Deadline:
        return {"error": {"message": _TIME_RAN_OUT}}
    except MemoryError:
        return {
            "error": {
                "message": "ran out of the memory the check allows (STEAMHARNESS_HANDLER_CHECK_MEMORY_BYTES)"
            }
        }
    except SyntaxError as exc:
        where = _project_file(base, exc.filename)
        return {
            "error": {
                "file": where or file,
                "line": exc.lineno if where else None,
                "message": f"SyntaxError: {exc.msg}",
            }
        }
    except BaseException as exc:  # the project's own code failed: told, never raised
        file_at, line = _failing_line(base, exc)
        return {
            "error": {
                "file": file_at or file,
                "line": line,
                "message": f"{type(exc).__name__}: {_said(exc)}{_started_one(exc)}",
            }
        }
    verdicts: dict[str, Any] = {}
    for function in functions:
        try:
            verdicts[function] = _verdict(module, file, function, defined)
        except _Deadline:
            verdicts[function] = {"problem": "could not be looked at: the check's time ran out"}
        except BaseException as exc:  # a property or __getattr__ of the project's raising
            verdicts[function] = {"problem": f"looking it up raised {type(exc).__name__}: {_said(exc)}"}
    return {"functions": verdicts}


def _verdict(module: Any, file: str, function: str, defined: dict[str, int]) -> dict[str, Any]:
    import difflib
    import inspect

    line = defined.get(function)
    if not hasattr(module, function):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        close = difflib.get_close_matches(function, names, n=1)
        hint = (
            f" (did you mean {close[0]!r}?)"
            if close
            else (f" (it defines {', '.join(names[:8])})" if names else "")
        )
        return {"problem": f"{file} defines no function {function!r}{hint}"}
    func = getattr(module, function)
    if not callable(func):
        return {"problem": f"{function} is a {type(func).__name__}, not a function", "line": line}
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        return {"problem": f"{function} is async; a handler is a plain `def {function}(ctx)`", "line": line}
    if inspect.isgeneratorfunction(func):
        return {"problem": f"{function} yields; a handler returns its result", "line": line}
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return {"line": line}  # nothing to read it from (a builtin): runs will tell
    try:
        signature.bind(None)
    except TypeError:
        shown = f"{function}{signature}"[:120]
        return {
            "problem": f"def {shown} cannot be called as a run calls it: {function}(ctx), with one argument",
            "line": line,
        }
    return {"line": line}


def _top_level_defs(source: bytes) -> dict[str, int]:
    """The line of each plain top-level `def`/`async def` (the last one of a name wins, as at
    run time); none when the file does not parse (its import says why)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    return {
        node.name: node.lineno
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _project_file(base: str, filename: str | None) -> str | None:
    """`filename` relative to the project folder, when it is in it."""
    if not filename:
        return None
    prefix = base.rstrip("/") + "/"
    return filename[len(prefix) :] if filename.startswith(prefix) else None


def _failing_line(base: str, exc: BaseException) -> tuple[str | None, int | None]:
    """The deepest frame of the traceback in the project's own files."""
    import traceback

    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(exc.__traceback__):
        relative = _project_file(base, frame.filename)
        if relative is not None:
            found = (relative, frame.lineno)
    return found


def _started_one(exc: BaseException) -> str:
    """What to do about an import that tried to start a process or a thread."""
    if isinstance(exc, BlockingIOError) or (isinstance(exc, RuntimeError) and "thread" in _said(exc)):
        return " (importing a handler file may start no process or thread: start them in the handler)"
    return ""


def _said(exc: BaseException) -> str:
    """An exception's message, cut (the parent makes it one terminal-safe line)."""
    try:
        return str(exc)[: MESSAGE_CHARS * 2]
    except BaseException:  # a message that cannot be made is left out
        return ""
