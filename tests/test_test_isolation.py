"""The tests stay independent under pytest-xdist (any order, any worker, two runs at once):
no test listens on, or connects to, a fixed loopback port, and no test writes a fixed path
in a shared temporary folder. A grep over the test sources: a fixed port in a URL that is
only parsed or printed (a settings value, an expected message) is fine; one handed to a
server, a socket or a client that connects is not."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

TESTS = REPO / "tests"
LOOPBACK = r"(?:127\.0\.0\.1|localhost|\[::1\]|::1)"
FIXED = r"[1-9][0-9]{1,4}"
# each: what it catches, and the pattern
RULES = [
    (
        "a socket bound or connected to a fixed port",
        rf"""\.(?:bind|connect|connect_ex)\(\(\s*["']{LOOPBACK}["']\s*,\s*{FIXED}\s*\)""",
    ),
    (
        "a connection opened to a fixed port",
        rf"""(?:create_connection|open_connection|connect_tcp)\(\(?\s*["']{LOOPBACK}["']\s*,\s*{FIXED}\b""",
    ),
    ("a server started on a fixed port", rf"""["']--port["']\s*,\s*["']?{FIXED}["']?\s*[,\]]"""),
    ("a server started on a fixed port", rf"""\bport\s*=\s*{FIXED}\b"""),
    ("a fixed port in the server's environment", rf"""STEAMHARNESS_PORT["']?\s*[:=,]\s*["']?{FIXED}"""),
    (
        "a request to a fixed loopback port",
        rf"""\.(?:get|post|put|patch|delete|head|options|request|stream)\(\s*(?:["'][A-Z]+["']\s*,\s*)?f?["']https?://{LOOPBACK}:{FIXED}\b""",
    ),
    ("a client of a fixed loopback port", rf"""base_url\s*=\s*f?["']https?://{LOOPBACK}:{FIXED}\b"""),
    ("a fixed path in a shared temporary folder", r"""open\(\s*f?["']/(?:tmp|var/tmp|dev/shm)/[\w.-]+["']"""),
]


def offences(text: str) -> list[tuple[int, str, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in RULES:
            if re.search(pattern, line):
                found.append((number, what, line.strip()))
    return found


def test_no_test_uses_a_fixed_loopback_port_or_a_fixed_shared_path() -> None:
    sources = [p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts and p != Path(__file__)]
    assert len(sources) > 100  # the walk found the suite
    found = [
        f"{path.relative_to(REPO)}:{number}: {what}: {line}"
        for path in sorted(sources)
        for number, what, line in offences(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "tests must take free ports and per-test folders:\n" + "\n".join(found)


def test_the_rules_catch_each_fixed_port_and_path_and_pass_free_ones() -> None:
    caught = [
        's.bind(("127.0.0.1", 8000))',
        'sock.connect(("localhost", 5432))',
        'socket.create_connection(("127.0.0.1", 9000), timeout=1)',
        '[STEAMHARNESS, "serve", "--port", "8123", "--data-dir", d]',
        "uvicorn.Config(app, host='127.0.0.1', port=8000)",
        'env = {"STEAMHARNESS_PORT": "8000"}',
        'httpx2.get("http://127.0.0.1:8000/healthz")',
        'client.request("GET", f"http://localhost:8080/{path}")',
        'httpx2.Client(base_url="http://127.0.0.1:8000")',
        'open("/tmp/steamharness-state.json", "w")',
    ]
    passed = [
        's.bind(("127.0.0.1", 0))',
        '[STEAMHARNESS, "serve", "--port", str(free_port()), "--data-dir", d]',
        'httpx2.get(f"{server.base_url}/healthz")',
        '({"url": "http://127.0.0.1:8000/mcp"}, "http://127.0.0.1:8000/mcp"),',
        'assert url(host="0.0.0.0").startswith("http://127.0.0.1:8000/api/workflows/")',
        'open(tmp_path / "state.json", "w")',
    ]
    assert [bool(offences(line)) for line in caught] == [True] * len(caught)
    assert [offences(line) for line in passed] == [[]] * len(passed)
