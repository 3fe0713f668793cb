"""No markup is marked safe or built from strings, except in one reviewed allowlist.

Autoescaping is the only thing between a remote server's (or a workflow's) text and live
HTML, and declarative htmx turns any attribute that text manages to write into a request
with the page's CSRF header. So the templates, the Python that feeds them and the page
scripts never use `|safe`, `Markup(`, `{% autoescape false %}`, `__html__`, attribute
strings built with `~`, or `innerHTML`-style sinks, unless the line is listed with a reason
in tests/template_safety_allowlist.txt. This check runs with the test suite (scripts/test)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

ALLOWLIST = Path(__file__).resolve().parent / "template_safety_allowlist.txt"

# A Jinja string literal that ends inside an attribute (`' aria-x="'`) joined with `~`, or
# `~` joining a bare quote: markup built as a string, which autoescaping cannot protect.
_ATTRIBUTE_STRING = r"""(?:'[^']*=\s*"'|"[^"]*=\s*\\?'")\s*~|~\s*(?:'"'|"'"|"\\"")"""
TEMPLATE_PATTERNS = {
    "|safe": re.compile(r"\|\s*safe\b"),
    "Markup": re.compile(r"\bMarkup\b"),
    "autoescape": re.compile(r"\{%-?\s*autoescape\b|autoescape\s+false", re.IGNORECASE),
    "string-built attribute": re.compile(_ATTRIBUTE_STRING),
}
PYTHON_PATTERNS = {
    "|safe": re.compile(r"\|\s*safe\b"),
    "Markup": re.compile(r"\bMarkup\s*\(|\bmarkupsafe\b"),
    "__html__": re.compile(r"\b__html__\b"),
    "autoescape off": re.compile(r"autoescape\s*=\s*(False|0|None)\b|autoescape\s+false", re.IGNORECASE),
    # Jinja's own default is no autoescaping: the one environment is made in templating.py.
    "unescaped environment": re.compile(r"\b(Template|Environment)\s*\("),
}
SCRIPT_PATTERNS = {
    "HTML sink": re.compile(r"\.(innerHTML|outerHTML)\s*\+?=|\binsertAdjacentHTML\b|\bdocument\.write\b"),
    "eval": re.compile(r"\beval\s*\(|\bnew\s+Function\s*\("),
}
SCANNED = (
    ("templates", "*", TEMPLATE_PATTERNS),
    ("webui", "*.py", PYTHON_PATTERNS),
    ("static", "*.js", SCRIPT_PATTERNS),
)
VENDORED = "vendor"  # third-party minified code (htmx), kept by its version


@dataclass(frozen=True)
class Finding:
    path: str
    line_no: int
    line: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_no}: {self.what}: {self.line}"


@dataclass(frozen=True)
class Entry:
    path: str
    line: str
    reason: str


def read_allowlist(path: Path) -> list[Entry]:
    """The entries of an allowlist file; a malformed one (no reason) fails loudly."""
    entries = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        parts = [p.strip() for p in text.split(" | ", 2)]
        if len(parts) != 3 or not all(parts):
            raise AssertionError(f"{path.name}:{n}: expected '<path> | <line> | <reason>', got {text!r}")
        entries.append(Entry(*parts))
    return entries


def scan(root: Path) -> list[Finding]:
    """Every line under `root` that marks markup safe or builds it from strings."""
    findings = []
    for folder, glob, patterns in SCANNED:
        base = root / folder
        if not base.is_dir():
            continue
        for file in sorted(base.rglob(glob)):
            if not file.is_file() or VENDORED in file.relative_to(base).parts or "__pycache__" in file.parts:
                continue
            rel = file.relative_to(root).as_posix()
            for n, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                for what, pattern in patterns.items():
                    if pattern.search(line):
                        findings.append(Finding(rel, n, line.strip(), what))
    return findings


def check(root: Path, allowlist: list[Entry]) -> list[str]:
    """The problems: findings not on the allowlist, and allowlist entries that match nothing."""
    allowed = {(e.path, e.line) for e in allowlist}
    findings = scan(root)
    problems = [f"not allowlisted: {f}" for f in findings if (f.path, f.line) not in allowed]
    found = {(f.path, f.line) for f in findings}
    problems += [
        f"stale allowlist entry: {e.path}: {e.line}" for e in allowlist if (e.path, e.line) not in found
    ]
    return problems


def test_no_template_python_or_script_marks_markup_safe_outside_the_allowlist() -> None:
    problems = check(REPO, read_allowlist(ALLOWLIST))
    assert problems == [], "\n".join(problems)


PLANTED = {
    "templates/macros/bad.html": [
        """{% set describedby = (' aria-describedby="' ~ ids|join(" ") ~ '"')|safe %}""",
        "<p>{{ text | safe }}</p>",
        "{% autoescape false %}{{ text }}{% endautoescape %}",
        """{% set attr = " data-x='" ~ value ~ "'" %}""",
        """{% set q = value ~ '"' %}""",
    ],
    "webui/web/bad.py": [
        "from markupsafe import Markup",
        "html = Markup(f'<b>{name}</b>')",
        "env = Environment(autoescape=False)",
        "page = Template(source).render(name=name)",
        "    def __html__(self) -> str:",
    ],
    "static/js/bad.js": ["card.innerHTML = text;", "el.insertAdjacentHTML('beforeend', html);"],
}


def plant(root: Path) -> None:
    for rel, lines in PLANTED.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(["<!-- fine -->", *lines, '{{ value }} id="{{ id }}"']) + "\n", "utf-8")


def test_the_check_fails_on_each_planted_way_of_marking_markup_safe(tmp_path: Path) -> None:
    plant(tmp_path)
    found = {(f.path, f.line) for f in scan(tmp_path)}
    expected = {(rel, line.strip()) for rel, lines in PLANTED.items() for line in lines}
    assert found == expected  # each planted line, and nothing escaped or plain
    problems = check(tmp_path, [])
    assert problems and all(p.startswith("not allowlisted: ") for p in problems)
    assert {p.split(": ", 1)[1].split(":", 1)[0] for p in problems} == set(PLANTED)


def test_an_allowlisted_line_passes_and_a_stale_entry_fails(tmp_path: Path) -> None:
    plant(tmp_path)
    entries = [Entry(rel, line.strip(), "reviewed") for rel, lines in PLANTED.items() for line in lines]
    assert check(tmp_path, entries) == []
    stale = Entry("templates/gone.html", "{{ x|safe }}", "was reviewed")
    assert check(tmp_path, [*entries, stale]) == ["stale allowlist entry: templates/gone.html: {{ x|safe }}"]


def test_an_allowlist_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    listed = tmp_path / "allow.txt"
    listed.write_text("templates/a.html | {{ x|safe }}\n", "utf-8")
    with pytest.raises(AssertionError, match=re.escape("expected '<path> | <line> | <reason>'")):
        read_allowlist(listed)


def test_vendored_scripts_are_not_scanned(tmp_path: Path) -> None:
    vendored = tmp_path / "static" / "vendor" / "lib-1.0.min.js"
    vendored.parent.mkdir(parents=True)
    vendored.write_text("a.innerHTML=b;", "utf-8")
    assert scan(tmp_path) == []
