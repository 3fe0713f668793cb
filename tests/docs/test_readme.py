"""The README is a front page that cannot rot: short, its two commands what CI runs, its
project the one under docs/examples/readme/ (its Python SDK example, as written, calls that
project on the live server of tests/docs/test_examples.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
EXAMPLE = ROOT / "docs/examples/readme"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", README, flags=re.S | re.M)


def test_the_readme_fits_on_a_few_screens_and_tells_no_timings() -> None:
    assert len(README.splitlines()) <= 200
    # Figures live in bench/README.md: no durations or test counts in the front page.
    assert not re.search(r"\b\d+:\d\d\b|\b\d[\d,]* (tests|passed)\b", README)


def test_its_two_commands_install_and_serve_and_run_what_ci_runs() -> None:
    first, second = blocks("sh")[:2]
    assert first.strip().endswith("pip install -e . && steamharness serve --demo")
    assert second.strip() == "bash scripts/test"
    assert (ROOT / ".ci/run").read_text().strip().endswith("bash scripts/test")


def test_its_project_is_the_example_project() -> None:
    assert blocks("json")[0] == (EXAMPLE / "package.json").read_text()
    assert blocks("python")[0] == (EXAMPLE / "main.py").read_text()
