"""Publishing stores the revision that was reviewed, or nothing.

A thread rewrites a project's draft in a loop (package.json and its handler file, written in
place, so a copy can also catch a half-written state) while an administrator publishes
version after version through the real page routes of a real `steamharness serve`: review
(GET the publish preview: its diff and revision), then publish that revision. Every stored
version's snapshot has exactly the revision reviewed for it (its row says so and its files
hash to it), or the publish was refused with 409 and the page shows the draft as it is now
(its diff, the revision to review next) and leaves no copy behind. The CLI's `--revision`
refuses the same way."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer, make_server
from webui.store.paths import resolve
from webui.workflows.targets import RevisionHasher

ADMIN = ("ada", "publish-race-pw-1")
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
REVISION_RE = re.compile(r'name="revision" value="([^"]*)"')
PUBLISHES = 19
REVIEW_TRIES = 50
DRAFT_CHANGED = "The draft changed since you reviewed it"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = make_server(tmp_path_factory.mktemp("publish-race"))
    server.add_user(ADMIN[0], admin=True, password=ADMIN[1])
    with server.running():
        yield server


class Rewriter:
    """Rewrites the hello draft in place until stopped: each round a different optional param
    in package.json and a matching comment in the handler, so rounds differ in revision and
    in the diff they show."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.package = json.loads((folder / "package.json").read_text(encoding="utf-8"))
        handler = self.package["entrypoints"][0]["handler"].split(":")[0]
        self.handler = folder / handler
        self.source = self.handler.read_text(encoding="utf-8")
        self.stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def write(self, n: int) -> None:
        data = json.loads(json.dumps(self.package))
        data["entrypoints"][0]["params"].append({"name": f"extra{n % 5}", "type": "string"})
        (self.folder / "package.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
        self.handler.write_text(f"{self.source}\n# round {n % 7}\n", encoding="utf-8")

    def loop(self) -> None:
        while not self.stop.is_set():
            self.rounds += 1
            self.write(self.rounds)

    def __enter__(self) -> Rewriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def admin_client(server: LiveServer) -> httpx2.Client:
    http = httpx2.Client(base_url=server.base_url, timeout=60, follow_redirects=False)
    form = http.get("/login")
    token = CSRF_RE.search(form.text)
    assert token, form.text
    r = http.post("/login", data={"username": ADMIN[0], "password": ADMIN[1], "csrf_token": token.group(1)})
    assert r.status_code == 303, r.text
    return http


def review(http: httpx2.Client) -> tuple[str, str]:
    """The publish preview as an administrator sees it: (CSRF token, the revision reviewed).

    A preview made while a file was half written shows that the draft cannot be published
    (422, no form): the person looks again, as the test does, a bounded number of times."""
    page = http.get(f"/projects/{HELLO}/publish")
    for _ in range(REVIEW_TRIES - 1):
        if page.status_code != 422:
            break
        page = http.get(f"/projects/{HELLO}/publish")
    assert page.status_code == 200, page.text
    csrf, revision = CSRF_RE.search(page.text), REVISION_RE.search(page.text)
    assert csrf and revision, page.text
    return csrf.group(1), revision.group(1)


def stored(server: LiveServer) -> dict[str, dict[str, object]]:
    return {row["version"]: row for row in server.rows("project_versions") if row["project_id"] == HELLO}


def leftovers(server: LiveServer) -> list[str]:
    versions = server.data_dir / "versions"  # no STEAMHARNESS_SHARED_DIR: the data dir is shared
    return sorted(
        str(p) for p in versions.rglob("*") if p.is_dir() and p.name.startswith((".publish-", ".review-"))
    )


def test_publishing_while_the_draft_is_rewritten_stores_only_reviewed_revisions(server: LiveServer) -> None:
    folder = server.projects / "hello"
    original = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    reviewed: dict[str, str] = {}
    refused = 0
    http = admin_client(server)
    try:
        with Rewriter(folder):
            for n in range(PUBLISHES):
                version = f"2.0.{n}"
                csrf, revision = review(http)
                r = http.post(
                    f"/projects/{HELLO}/publish",
                    data={"csrf_token": csrf, "revision": revision, "version": version},
                )
                if r.status_code == 303:
                    reviewed[version] = revision
                    continue
                # The refusal shows the draft as it is now: a diff and a revision to review
                # (409), or, caught half written, why it cannot be published (422).
                assert r.status_code in (409, 422), r.text
                if r.status_code == 409:
                    assert DRAFT_CHANGED in r.text
                    again = REVISION_RE.search(r.text)
                    assert again and again.group(1).startswith("rev-")
                    assert 'id="changes-h"' in r.text
                else:
                    assert "invalid JSON" in r.text or "package.json" in r.text
                    assert REVISION_RE.search(r.text) is None
                refused += 1
    finally:
        http.close()
        for path, content in original.items():
            path.write_bytes(content)
    rows = stored(server)
    published = {v: row for v, row in rows.items() if v.startswith("2.0.")}
    # Nothing but what the route accepted was stored ...
    assert sorted(published) == sorted(reviewed)
    assert len(published) + refused == PUBLISHES
    for version, row in published.items():
        # ... each with the revision reviewed for it, and files that really are that revision.
        assert row["revision"] == reviewed[version], version
        snapshot = resolve(str(row["snapshot_dir"]), server.data_dir)
        assert RevisionHasher().revision(snapshot) == reviewed[version], version
    assert leftovers(server) == []


def test_a_stale_revision_is_refused_with_the_new_diff_and_nothing_is_stored(server: LiveServer) -> None:
    folder = server.projects / "hello"
    package = folder / "package.json"
    before = package.read_text(encoding="utf-8")
    http = admin_client(server)
    try:
        csrf, revision = review(http)
        data = json.loads(before)
        data["entrypoints"][0]["params"].append({"name": "late", "type": "string", "required": True})
        package.write_text(json.dumps(data), encoding="utf-8")
        r = http.post(
            f"/projects/{HELLO}/publish", data={"csrf_token": csrf, "revision": revision, "version": "3.0.0"}
        )
        assert r.status_code == 409, r.text
        assert DRAFT_CHANGED in r.text
        new = REVISION_RE.search(r.text)
        assert new and new.group(1) != revision
        assert "greet.late" in r.text.replace("</code>", "").replace("<code>", "")
        # The revision the refusal showed is the one that now publishes.
        r = http.post(
            f"/projects/{HELLO}/publish",
            data={"csrf_token": csrf, "revision": new.group(1), "version": "3.0.0"},
        )
        assert r.status_code == 303, r.text
        assert stored(server)["3.0.0"]["revision"] == new.group(1)
    finally:
        http.close()
        package.write_text(before, encoding="utf-8")
    assert leftovers(server) == []


def test_the_cli_publishes_only_the_revision_named(server: LiveServer) -> None:
    folder = server.projects / "hello"
    package = folder / "package.json"
    before = package.read_text(encoding="utf-8")
    try:
        diff = server.cli("projects", "diff", HELLO)
        line = next(x for x in diff.stderr.splitlines() if x.startswith("draft revision "))
        revision = line.split()[2]
        data = json.loads(before)
        data["description"] = "changed after the diff"
        package.write_text(json.dumps(data), encoding="utf-8")
        refused = server.cli(
            "projects", "publish", HELLO, "--version", "4.0.0", "--revision", revision, check=False
        )
        assert refused.returncode != 0
        assert "changed since it was reviewed" in refused.stderr
        assert "4.0.0" not in stored(server)
        now = server.cli("projects", "diff", HELLO).stderr
        current = next(x for x in now.splitlines() if x.startswith("draft revision ")).split()[2]
        ok = server.cli("projects", "publish", HELLO, "--version", "4.0.0", "--revision", current)
        assert ok.stdout.strip() == "4.0.0"
        assert stored(server)["4.0.0"]["revision"] == current
    finally:
        package.write_text(before, encoding="utf-8")
    assert leftovers(server) == []
