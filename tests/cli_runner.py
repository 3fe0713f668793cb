"""The `steamharness` command run in this process, answered like a finished process.

A real process costs its interpreter start and the whole stack's imports (about a second,
much more on a loaded machine) for each command; the command's own work is milliseconds.
`run_cli` calls the same entry point (`webui.cli.main`, its one-line errors and exit codes
included) with the arguments as argv, `stdin` as the standard input and `env` as the whole
environment, and returns what a process would have: the exit code, stdout and stderr. The
click command typer builds from `webui.cli.app` is built once here (`app()` rebuilds it from
the annotations at every call, most of the in-process cost). The engines the command opens
(`webui.store.db.make_engine`, which the CLI imports at each call) are disposed when it ends,
as a process's end would close their connections.
Every command family keeps at least one test through a real process (argv, pipes and the
interpreter's exit are the operating system's there)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from unittest import mock

from tests.e2e.server import STEAMHARNESS


@functools.cache
def _command() -> Any:
    import typer.main

    from webui import cli

    return typer.main.get_command(cli.app)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(
    args: Sequence[str], *, stdin: str = "", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`steamharness ARGS` with `stdin` (a pipe that ends: never a terminal) and `env`
    (None: this process's environment); its exit code, stdout and stderr."""
    from webui import cli
    from webui.store import db

    engines: list[Any] = []
    opened = db.make_engine

    def make_engine(*args: Any, **kwargs: Any) -> Any:
        engine = opened(*args, **kwargs)
        engines.append(engine)
        return engine

    out, err = io.StringIO(), io.StringIO()
    pipe = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    argv = [STEAMHARNESS, *args]
    with (
        _environment(dict(os.environ) if env is None else env),
        mock.patch.object(sys, "argv", argv),
        mock.patch.object(sys, "stdin", pipe),
        mock.patch.object(cli, "app", _command()),
        mock.patch.object(db, "make_engine", make_engine),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message"): the interpreter prints it and exits 1
                print(exc.code, file=sys.stderr)
                code = 1
        finally:
            for engine in engines:
                engine.dispose()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
