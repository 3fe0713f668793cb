"""Workflow projects whose handlers look for what of other projects, other runs and the
server they can reach: a walker that lists and reads everything it can from its working
directory up and from the server's folders, an attacker that signals and inspects other
workers, and a victim that holds a secret and waits."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import server_env
from tests.e2e.server import LiveServer, free_port

WALKER_ID = "a7d1c3e5-0b2f-4a6c-8e1d-3f5a7c9e1b2d"
VICTIM_ID = "b8e2d4f6-1c3a-4b7d-9f2e-4a6b8d0f2c3e"
SECRET = "victim-secret-4f1d9c"  # in the victim's .env and code: never readable by the walker

WALKER_HANDLERS = r'''
import os
import stat
from collections import deque

VISIT_LIMIT = 200_000
REPORT_LIMIT = 300  # of each kind: enough to name what should not be there
SKIP = ("/proc", "/sys", "/dev")


def _absolute(path):
    return os.path.normpath(os.path.join(os.getcwd(), path))


def walk(ctx):
    """Breadth-first over everything reachable: the working directory and each parent
    (by `..`, which needs no right on the parents' names), the given folders, and `/`.
    Reports every folder it could list and every file it could read under `watch`."""
    starts = ["."]
    hop = ".."
    for _ in range(64):  # up to /
        starts.append(hop)
        if _absolute(hop) == "/":
            break
        hop += "/.."
    starts += list(ctx.params.get("roots") or []) + ["/"]
    watch = [os.path.normpath(w) for w in ctx.params.get("watch") or []]
    # What every run may read and holds no secret (the checkout, the interpreter's files):
    # not walked, however it is reached (a checkout in /tmp is under `watch`).
    skip = [os.path.normpath(s) for s in ctx.params.get("skip") or []]
    listed, read, seen = set(), set(), set()
    queue = deque(starts)
    visits = 0
    while queue and visits < VISIT_LIMIT:
        path = queue.popleft()
        shown = _absolute(path)
        skipped = any(shown == s or shown.startswith(s + "/") for s in skip)
        if shown in seen or shown.startswith(SKIP) or skipped:
            continue
        visits += 1
        try:
            st = os.lstat(path)
        except OSError:
            continue
        mine = any(shown == w or shown.startswith(w + "/") for w in watch)
        if stat.S_ISDIR(st.st_mode):
            try:
                names = os.listdir(path)
            except OSError:
                continue  # another spelling of it (from /, say) may still get in
            seen.add(shown)
            if mine:
                listed.add(shown)
            queue.extend(os.path.join(path, n) for n in names)
        elif stat.S_ISREG(st.st_mode) and mine:
            try:
                with open(path, "rb") as fh:
                    fh.read(1)
            except OSError:
                continue
            seen.add(shown)
            read.add(shown)
    # Named directly, the way code that knows the layout would try them.
    for path in ctx.params.get("probe") or []:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                with open(path, "rb") as fh:
                    fh.read(1)
        except OSError:
            continue
        (listed if os.path.isdir(path) else read).add(path)
    return {
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "uid": os.getuid(),
        "visits": visits,
        "listed": sorted(listed),
        "read": sorted(read),
    }


def survey(ctx):
    """Everything reachable from `/` and from each parent of the working directory, except
    inside `allowed` and the run's own folders (working directory, HOME), which are not
    walked: every folder listed there with its names, every file read, every link; then
    each `probe` path named directly."""
    shown = [os.path.normpath(p) for p in ctx.params.get("allowed") or []]
    shown += [os.getcwd(), os.path.normpath(os.environ["HOME"])]

    def inside(path):
        return any(path == s or path.startswith(s.rstrip("/") + "/") for s in shown)

    starts, hop = ["/", "."], ".."
    for _ in range(64):
        starts.append(hop)
        if _absolute(hop) == "/":
            break
        hop += "/.."
    folders, files, links, seen = {}, [], {}, set()
    queue = deque(starts)
    while queue and len(seen) < VISIT_LIMIT:
        path = queue.popleft()
        shown_as = _absolute(path)
        if shown_as in seen or shown_as.startswith(SKIP) or inside(shown_as):
            continue
        seen.add(shown_as)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            links[shown_as] = os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            try:
                names = os.listdir(path)
            except OSError:
                continue
            folders[shown_as] = sorted(names)
            queue.extend(os.path.join(path, n) for n in names)
        elif stat.S_ISREG(st.st_mode):
            try:
                with open(path, "rb") as fh:
                    fh.read(1)
            except OSError:
                continue
            files.append(shown_as)
    reached = []
    for path in ctx.params.get("probe") or []:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                with open(path, "rb") as fh:
                    fh.read(1)
        except OSError:
            continue
        reached.append(path)
    try:
        up = sorted(os.listdir(".."))
    except OSError as exc:
        up = exc.strerror
    shown_folders = dict(sorted(folders.items())[:REPORT_LIMIT])
    return {
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "uid": os.getuid(),
        "up": up,
        "folders": {k: v[:REPORT_LIMIT] for k, v in shown_folders.items()},
        "files": sorted(files)[:REPORT_LIMIT],
        "links": dict(sorted(links.items())[:REPORT_LIMIT]),
        "counts": [len(folders), len(files), len(links)],
        "reached": reached,
    }


def _uid_of(pid):
    with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def attack(ctx):
    """Signal and inspect every process of another uid of the worker range."""
    low, high = int(ctx.params["uidLow"]), int(ctx.params["uidHigh"])
    me = os.getuid()
    results = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            uid = _uid_of(pid)
        except OSError:
            continue
        if uid is None or uid == me or not (low <= uid < high):
            continue
        result = {"pid": pid, "uid": uid}
        try:
            os.kill(pid, 15)
            result["kill"] = "sent"
        except OSError as exc:
            result["kill"] = exc.errno
        for what, op in (
            ("environ", lambda: open(f"/proc/{pid}/environ", "rb").read()),
            ("cwd", lambda: os.readlink(f"/proc/{pid}/cwd")),
            ("cwdList", lambda: os.listdir(f"/proc/{pid}/cwd")),
            ("fd", lambda: os.listdir(f"/proc/{pid}/fd")),
            ("mem", lambda: open(f"/proc/{pid}/mem", "rb").read(1)),
        ):
            try:
                op()
                result[what] = "read"
            except OSError as exc:
                result[what] = exc.errno
        results.append(result)
    return {"uid": me, "targets": results}
'''

VICTIM_HANDLERS = r'''
import os
import subprocess

SECRET = "victim-secret-4f1d9c"


def hold(ctx):
    """Leave an output in the created files, start a program (dumpable again after its
    exec) and wait for a person: its processes stay alive meanwhile."""
    ctx.files.create("victim-output.txt", SECRET)
    child = subprocess.Popen(["sleep", "600"], env={"VICTIM": SECRET})
    ctx.log(f"worker {os.getpid()} child {child.pid}")
    answer = ctx.ask("Go on?", [{"name": "ok", "type": "boolean"}])
    child.kill()
    return {"answer": answer}
'''


def _write(
    folder: Path, project_id: str, name: str, handlers: str, entrypoints: list[dict[str, object]]
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    package = {
        "id": project_id,
        "name": name,
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"timeoutSeconds": 120, **ep} for ep in entrypoints],
    }
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (folder / "h.py").write_text(handlers, encoding="utf-8")
    return folder


def write_walker(folder: Path) -> Path:
    return _write(
        folder,
        WALKER_ID,
        "walker",
        WALKER_HANDLERS,
        [
            {
                "id": "walk",
                "handler": "h.py:walk",
                "params": [
                    {"name": "roots", "type": "string", "multiple": True},
                    {"name": "watch", "type": "string", "multiple": True},
                    {"name": "probe", "type": "string", "multiple": True},
                    {"name": "skip", "type": "string", "multiple": True},
                ],
            },
            {
                "id": "survey",
                "handler": "h.py:survey",
                "params": [
                    {"name": "allowed", "type": "string", "multiple": True},
                    {"name": "probe", "type": "string", "multiple": True},
                ],
            },
            {
                "id": "attack",
                "handler": "h.py:attack",
                "params": [{"name": "uidLow", "type": "number"}, {"name": "uidHigh", "type": "number"}],
            },
        ],
    )


def write_victim(folder: Path) -> Path:
    _write(folder, VICTIM_ID, "victim", VICTIM_HANDLERS, [{"id": "hold", "handler": "h.py:hold"}])
    (folder / ".env").write_text(f"VICTIM_TOKEN={SECRET}\n", encoding="utf-8")
    (folder / "notes.txt").write_text(SECRET, encoding="utf-8")
    return folder


# ---------------------------------------------------------------- a server holding both


def isolated_server(base: Path) -> LiveServer:
    """A `serve` (not started yet) with a shared dir apart from its data dir, both
    projects registered from one projects dir and published, an account per project, and
    the layout an older version left behind: its folders 0755, an upload's blob 0644."""
    for folder in (base, base / "projects"):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, 0o755)  # no parent's mode may be what keeps a worker out
    projects = base / "projects"
    write_walker(projects / "walker")
    write_victim(projects / "victim")
    shared = base / "shared"
    admin_key = secrets.token_urlsafe(32)
    env = server_env()
    server = LiveServer(
        data_dir=base / "data",
        projects=projects,
        port=free_port(),
        admin_key=admin_key,
        env={**env, "STEAMHARNESS_SERVER_ADMIN_KEY": admin_key, "STEAMHARNESS_SHARED_DIR": str(shared)},
        extra_args=["--projects-dir", str(projects)],
    )
    for name, project_id in (("walker", WALKER_ID), ("victim", VICTIM_ID)):
        server.add_project(projects / name, project_id)
    for user, project_id in (("alice", WALKER_ID), ("bob", VICTIM_ID)):
        server.add_user(user)
        server.grant(user, [project_id])
    # What an older version left: every folder 0755, a blob 0644, a world-readable demo key.
    blob = shared / "files" / "ab" / ("ab" + "0" * 62)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(SECRET, encoding="utf-8")
    (shared / "created-files").mkdir(exist_ok=True)
    (server.data_dir / "demo-api-key").write_text(SECRET, encoding="utf-8")
    for path in [shared, *shared.rglob("*"), server.data_dir / "demo-api-key"]:
        if ".incoming" not in path.name:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return server


def account_key(server: LiveServer, user: str, project_id: str) -> str:
    return server.create_key(user, projects=[project_id])


async def call_tool(
    server: LiveServer,
    key: str,
    project_id: str,
    tool: str,
    arguments: dict[str, Any],
    target: str = "latest",
) -> dict[str, Any]:
    """One tool call over Streamable HTTP; the structured result (an `interaction_required`
    one for a run that waits for a person: this client takes no elicitations)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=180)) as http:
        with anyio.fail_after(240):
            url = server.mcp_url(project_id, target)
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                result = await client.call_tool(tool, arguments)
    assert isinstance(result.content[0], types.TextContent)
    found = json.loads(result.content[0].text)
    waiting = found.get("status") == "waiting_for_input"
    assert not result.is_error or waiting, result.content[0].text
    return found
