"""A published snapshot carries bytecode the server compiled from its copied sources, and
its runs load it instead of compiling the handler each time (webui.projects.bytecode);
a `.pyc` that came with the draft is never what a run executes."""

from __future__ import annotations

import importlib.util
import marshal
import os
import shutil
import stat
from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore[attr-defined]
from pathlib import Path

import pytest

from tests import prepared
from tests.conftest import EXAMPLES
from tests.helpers import run_to_end
from webui.errors import ProjectError
from webui.projects.bytecode import compile_snapshot
from webui.projects.registry import ProjectRegistry
from webui.services import open_services
from webui.settings import Settings
from webui.store.db import make_engine
from webui.workflows.project import load_project
from webui.workflows.targets import Target

pytestmark = pytest.mark.anyio

HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
IMPOSTOR = 'def echo(ctx):\n    return {"text": "from the planted bytecode"}\n'


def planted_pyc(source: Path, code_text: str) -> bytes:
    """Bytecode of `code_text` with a header Python accepts for `source` as it is now."""
    st = source.stat()
    code = compile(code_text, str(source), "exec")
    return bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))


def publish(tmp_path: Path) -> tuple[Path, Path]:
    """examples/hello registered from a draft folder and published: (draft, snapshot)."""
    draft = tmp_path / "projects" / "hello"
    shutil.copytree(EXAMPLES / "hello", draft, ignore=shutil.ignore_patterns("__pycache__"))
    # A draft's own bytecode, valid for its source, saying something else.
    cache = Path(importlib.util.cache_from_source(str(draft / "main.py")))
    cache.parent.mkdir()
    cache.write_bytes(planted_pyc(draft / "main.py", IMPOSTOR))
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    registry = ProjectRegistry(engine, tmp_path / "shared" / "versions")
    registry.register(draft)
    registry.publish(HELLO)
    snapshot = registry.resolve(HELLO, Target("latest")).project.root
    engine.dispose()
    return draft, Path(snapshot)


def test_publishing_compiles_the_copied_sources_and_never_copies_the_drafts_bytecode(tmp_path: Path) -> None:
    draft, snapshot = publish(tmp_path)
    pyc = Path(importlib.util.cache_from_source(str(snapshot / "main.py")))
    drafts = Path(importlib.util.cache_from_source(str(draft / "main.py")))
    assert pyc.is_file() and pyc.read_bytes() != drafts.read_bytes()
    code = marshal.loads(pyc.read_bytes()[16:])
    source = (snapshot / "main.py").read_text(encoding="utf-8")
    assert "from the planted bytecode" not in repr(code.co_consts) and "def echo" in source
    # Readable by whoever may read the folder it sits in (not the server's umask).
    assert stat.S_IMODE(pyc.parent.stat().st_mode) == stat.S_IMODE(snapshot.stat().st_mode)
    assert stat.S_IMODE(pyc.stat().st_mode) == stat.S_IMODE((snapshot / "main.py").stat().st_mode)


async def test_a_run_of_the_snapshot_executes_its_bytecode_not_a_compile_of_the_source(
    tmp_path: Path,
) -> None:
    _, snapshot = publish(tmp_path)
    # Proof that the worker loads the bytecode: replace it with code that answers otherwise.
    pyc = Path(importlib.util.cache_from_source(str(snapshot / "main.py")))
    pyc.write_bytes(planted_pyc(snapshot / "main.py", IMPOSTOR))
    project = load_project(snapshot)
    prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    async with open_services(Settings(data_dir=tmp_path / "data", kill_grace_seconds=0.5)) as svc:
        final = await run_to_end(svc, project, "echo", {"text": "hi"})
        assert (final.status, final.output) == ("success", {"text": "from the planted bytecode"})
        # A source changed since it was compiled is compiled again, as Python always does.
        main = snapshot / "main.py"
        main.write_text(main.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
        os.utime(main, (main.stat().st_atime, main.stat().st_mtime + 5))
        final = await run_to_end(svc, project, "echo", {"text": "hi"})
        assert (final.status, final.output) == ("success", {"text": "hi"})


def test_files_that_do_not_compile_or_are_not_regular_are_left_to_their_runs(tmp_path: Path) -> None:
    folder = tmp_path / "snap"
    (folder / "pkg").mkdir(parents=True)
    (folder / "good.py").write_text("X = 1\n", encoding="utf-8")
    (folder / "pkg" / "mod.py").write_text("Y = 2\n", encoding="utf-8")
    (folder / "broken.py").write_text("def (:\n", encoding="utf-8")
    (folder / "deep.py").write_text("x = " + "(" * 300 + ")" * 300 + "\n", encoding="utf-8")
    (folder / "link.py").symlink_to(folder / "good.py")
    (folder / "node_modules").mkdir()
    (folder / "node_modules" / "skip.py").write_text("Z = 3\n", encoding="utf-8")
    assert compile_snapshot(folder) == 2
    assert Path(importlib.util.cache_from_source(str(folder / "good.py"))).is_file()
    assert Path(importlib.util.cache_from_source(str(folder / "pkg" / "mod.py"))).is_file()
    for name in ("broken.py", "deep.py", "link.py"):
        assert not Path(importlib.util.cache_from_source(str(folder / name))).exists()
    assert not (folder / "node_modules" / "__pycache__").exists()


def test_a_file_crafted_to_take_the_compiler_long_is_cut_off_and_publish_goes_on(tmp_path: Path) -> None:
    """CPython's compiler is quadratic on some inputs (holding the GIL meanwhile): it runs
    in a child process that a bound stops; nothing is compiled, nothing fails."""
    folder = tmp_path / "snap"
    folder.mkdir()
    (folder / "slow.py").write_text("x = f'" + "{a}" * 80_000 + "'\n", encoding="utf-8")
    assert compile_snapshot(folder, timeout=0.5) == 0
    assert not Path(importlib.util.cache_from_source(str(folder / "slow.py"))).exists()


def test_a_file_crafted_to_take_the_compiler_gigabytes_is_refused_memory(tmp_path: Path) -> None:
    folder = tmp_path / "snap"
    folder.mkdir()
    (folder / "huge.py").write_text("import " + ".".join(["a"] * 60_000) + "\n", encoding="utf-8")
    (folder / "fine.py").write_text("X = 1\n", encoding="utf-8")
    assert compile_snapshot(folder) == 1  # the child ran out of its address space on one file
    assert not Path(importlib.util.cache_from_source(str(folder / "huge.py"))).exists()
    assert Path(importlib.util.cache_from_source(str(folder / "fine.py"))).is_file()


def test_a_draft_link_leaving_the_project_is_refused_and_one_inside_it_published_as_a_link(
    tmp_path: Path,
) -> None:
    """Publishing never follows a link: what another project's file or a device holds is
    never copied into a snapshot its runs can read."""
    secret = tmp_path / "elsewhere" / "other-project.env"
    secret.parent.mkdir()
    secret.write_text("TOKEN=secret\n", encoding="utf-8")
    draft = tmp_path / "projects" / "hello"
    shutil.copytree(EXAMPLES / "hello", draft, ignore=shutil.ignore_patterns("__pycache__"))
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    registry = ProjectRegistry(engine, tmp_path / "shared" / "versions")
    registry.register(draft)
    for name, target in (
        ("leak.env", str(secret)),
        ("rel.env", "../../elsewhere/other-project.env"),
        ("zero", "/dev/zero"),
        ("dangling", "missing"),
        ("loop", "loop"),
    ):
        (draft / name).symlink_to(target)
        with pytest.raises(ProjectError, match=f"{name}: a link to"):
            registry.publish(HELLO)
        (draft / name).unlink()
    (draft / "alias.py").symlink_to("main.py")
    registry.publish(HELLO)
    snapshot = Path(registry.resolve(HELLO, Target("latest")).project.root)
    assert (snapshot / "alias.py").is_symlink() and os.readlink(snapshot / "alias.py") == "main.py"
    assert not list(snapshot.rglob("*.env"))
    engine.dispose()
