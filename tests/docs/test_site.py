"""The documentation site builds in strict mode: Sphinx with every warning an error, so a
broken link or anchor, a page missing from every table of contents or a missing page fails.
The build reads nothing from the network (the theme's assets ship with it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
BUILD = [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html"]


def build(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BUILD, str(source), str(out)], capture_output=True, text=True, timeout=600)


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    done = build(DOCS, tmp_path / "html")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "html/server-api/tools-call.html").is_file()
    assert (tmp_path / "html/getting-started.html").is_file()


def test_a_broken_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text((DOCS / "conf.py").read_text())
    (source / "index.md").write_text(
        "# Home\n\n[there](other.md#no-such-heading)\n\n```{toctree}\nother\n```\n"
    )
    (source / "other.md").write_text("# Other\n\n## A heading\n")
    done = build(source, tmp_path / "html")
    assert done.returncode != 0
    assert "no-such-heading" in done.stdout + done.stderr
