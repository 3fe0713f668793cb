"""A handler's hostile stdout on the MCP call that follows its run (webui/runs/worker_loop.py
`WatchedLines`, webui/mcp/logs.py), against the real app (in this process): a flood, in one
write and in many, sends the cap and one exact note; a huge line arriving in many chunks is
cut; control characters never reach the client; one session's level is its own; and a
configuration secret the handler prints or logs, in any of its forms, reaches the client as
`[redacted]` (log lines are redacted for every viewer, the run's own account too, so the
caller, who owns the run, is no exception)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import quote

import httpx2
import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_logging import LOGS_PROJECT, Seen, call, client, logs_project, set_level
from tests.helpers import WAIT
from tests.support import in_process_server
from webui.mcp.logs import MAX_MESSAGES_PER_CALL, MESSAGE_LIMIT

pytestmark = pytest.mark.anyio

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SECRET = 'tok/3n "é" x&y=1'

HANDLERS = """

def stdout_flood(ctx):
    count = int(ctx.params["count"])
    sys.stdout.write("".join(f"out {i}\\n" for i in range(count)))
    for i in range(300):
        print(f"single {i}", flush=True)
    return "flooded"


def stdout_huge(ctx):
    for _ in range(50):
        sys.stdout.write("x" * 10_000)
        sys.stdout.flush()
    sys.stdout.write("\\n")
    return "huge"


def stdout_controls(ctx):
    print("red \\x1b[31mtext\\x07 and \\u202egnirts\\x00 mid\\rreturn \\x85end\\tok")
    return "controls"


def stdout_only(ctx):
    print("one")
    print("two")
    return "printed"


def secrets(ctx):
    import json
    from urllib.parse import quote

    token = ctx.config["token"]
    print("plain " + token)
    print("json " + json.dumps({"token": token}))
    ctx.log("url https://api.example/v1?token=" + quote(token, safe=""), "warning")
    half = len(token) // 2
    sys.stdout.write("split " + token[:half])
    sys.stdout.flush()
    sys.stdout.write(token[half:] + " end\\n")
    return "leaked?"
"""


def _entry(name: str) -> dict[str, object]:
    return {
        "id": name,
        "title": name,
        "description": f"The {name} handler.",
        "handler": f"logs.py:{name}",
        "task": "never",
        "params": [{"name": "count", "type": "number"}] if name == "stdout_flood" else [],
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("mcp-stdout-attacks")) as live:
        names = ("stdout_flood", "stdout_huge", "stdout_controls", "stdout_only", "secrets")
        folder = logs_project(live.projects / "logs", HANDLERS, [_entry(n) for n in names])
        package = json.loads((folder / "package.json").read_text())
        package["configuration"] = {"fields": [{"name": "token", "type": "secret"}]}
        (folder / "package.json").write_text(json.dumps(package, indent=2))
        live.add_project(folder, LOGS_PROJECT)
        yield live


async def test_a_stdout_flood_sends_the_cap_and_one_exact_note(server: LiveServer) -> None:
    key = server.create_key("flood")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "debug")
        result = await call(c, seen, "stdout_flood", {"count": 50_000})
    texts = seen.texts()
    assert len(texts) == MAX_MESSAGES_PER_CALL + 1
    assert texts[:MAX_MESSAGES_PER_CALL] == [f"out {i}" for i in range(MAX_MESSAGES_PER_CALL)]
    unsent = 50_000 + 300 - MAX_MESSAGES_PER_CALL
    assert texts[-1].startswith(f"{unsent} more log lines not sent"), texts[-1]
    assert seen.events[-1][0] == "result"
    run_id = (result.structured_content or {})["runId"]
    kept = server.query("select text from run_events where run_id = :r and kind = 'stdout'", r=run_id)
    assert "".join(e["text"] for e in kept).count("\n") == 50_300  # the timeline keeps them all


async def test_a_huge_stdout_line_in_many_chunks_is_cut_and_says_by_how_much(server: LiveServer) -> None:
    key = server.create_key("huge")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "info")
        await call(c, seen, "stdout_huge")
    (text,) = seen.texts()
    assert (
        text == "x" * MESSAGE_LIMIT + f"… ({500_000 - MESSAGE_LIMIT} characters more in the run's timeline)"
    )


async def test_control_characters_in_a_stdout_line_never_reach_the_client(server: LiveServer) -> None:
    key = server.create_key("controls")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "info")
        await call(c, seen, "stdout_controls")
    (text,) = seen.texts()
    assert not CONTROL.search(text), repr(text)
    assert text == "red \ufffd[31mtext\ufffd and \ufffdgnirts\ufffd mid\ufffdreturn \ufffdend\tok"


async def test_one_sessions_level_does_not_bring_stdout_to_another_session(server: LiveServer) -> None:
    key = server.create_key("lev")
    other_key = server.create_key("mallory")
    asked, same_key, other, above = Seen(), Seen(), Seen(), Seen()
    async with (
        client(server, key, "legacy", asked) as a,
        client(server, key, "legacy", same_key) as b,
        client(server, other_key, "legacy", other) as m,
        client(server, other_key, "legacy", above) as w,
    ):
        await set_level(a, "debug")
        await set_level(w, "warning")  # stdout is info: below it
        for c, seen in ((b, same_key), (m, other), (w, above), (a, asked)):
            await call(c, seen, "stdout_only")
    assert same_key.logs() == [] and other.logs() == [] and above.logs() == []
    assert asked.texts("stdout") == ["one", "two"]


async def test_a_configured_secret_printed_or_logged_reaches_the_caller_redacted(server: LiveServer) -> None:
    key = server.create_key("owner", scopes=["runs.create", "runs.read", "configs"])
    base = f"/api/workflows/{LOGS_PROJECT}/configs"
    with httpx2.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    ) as api:
        etag = api.get(f"{base}/default").headers["etag"]
        saved = api.patch(f"{base}/default", headers={"If-Match": etag}, json={"values": {"token": SECRET}})
        assert saved.status_code == 200, saved.text
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "info")
        await call(c, seen, "secrets")
    texts = seen.texts()
    assert sorted(texts) == sorted(
        [
            "plain [redacted]",
            'json {"token": "[redacted]"}',
            "url https://api.example/v1?token=[redacted]",
            "split [redacted] end",
        ]
    ), texts
    forms = {SECRET, json.dumps(SECRET)[1:-1], quote(SECRET, safe=""), "tok/3n", "tok%2F3n"}
    assert not [f for f in forms for t in texts if f in t]
