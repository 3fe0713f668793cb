"""Configurations reaching runs over the Streamable HTTP endpoint of a real server: each
account's active configuration, `&config=NAME` bound into the session like the target, the
TypeScript SDK client, and a run's snapshot surviving a change while it waits."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from sqlmodel import Session, select

from tests.e2e.server import LiveServer
from tests.e2e.test_http_mcp import (
    TIMEOUT,
    _wait_run,
    headers,
    init_body,
    payload,
    sdk_client,
    sse_json,
)
from tests.node_client import call, run_client_script, tool_payload
from tests.support.inprocess import make_in_process_server
from webui.audit.log import AuditLog
from webui.configs.model import ConfigPlace, Who
from webui.configs.places import account_place
from webui.configs.service import ConfigService
from webui.services import config_service
from webui.settings import Settings
from webui.store import accounts as account_store
from webui.store.db import make_engine
from webui.store.models import AuditEvent, Run
from webui.workflows.configuration import load_config_fields

pytestmark = pytest.mark.anyio

PROJECT = "6a1e2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
SECRET = "alice-secret-7f3k"
DEFAULTS = {"endpoint": "https://a.example", "threshold": 3, "token": None}
WHO = Who(actor="tester")
HANDLERS = """import hashlib


def show(ctx):
    return dict(ctx.config)


def ask_then_show(ctx):
    ctx.ask("Go on?", [{"name": "ok", "type": "boolean"}])
    seen = dict(ctx.config)
    token = seen["token"]
    seen["token"] = hashlib.sha256(token.encode()).hexdigest() if token else None
    return seen
"""


def write_project(folder: Path) -> None:
    folder.mkdir()
    doc = {
        "id": PROJECT,
        "name": "configured",
        "version": "1.0.0",
        "projectType": "workflow",
        "configuration": {
            "fields": [
                {"name": "endpoint", "type": "string", "required": True, "default": "https://a.example"},
                {"name": "threshold", "type": "number", "default": 3},
                {"name": "token", "type": "secret"},
            ]
        },
        "entrypoints": [
            {"id": "show", "title": "Show", "description": "The configuration.", "handler": "h.py:show"},
            {
                "id": "ask_then_show",
                "title": "Ask, then show",
                "description": "Waits for an answer, then returns the configuration.",
                "handler": "h.py:ask_then_show",
            },
        ],
    }
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "h.py").write_text(HANDLERS, encoding="utf-8")


@dataclass
class World:
    server: LiveServer
    configs: ConfigService
    alice: str  # API keys
    bob: str
    alice_place: ConfigPlace
    bob_place: ConfigPlace

    def url(self, config: str | None = None) -> str:
        url = self.server.mcp_url(PROJECT)
        return url if config is None else f"{url}&config={config}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("http-config")
    server = make_in_process_server(tmp, server_database_url)
    folder = server.projects / "configured"
    write_project(folder)
    server.add_project(folder, PROJECT)
    alice, bob = server.create_key("alice"), server.create_key("bob")
    settings = Settings(data_dir=server.data_dir, database_url=server.store_url)
    engine = make_engine(settings.resolved_database_url)
    _, fields = load_config_fields(folder)

    def place(name: str) -> ConfigPlace:
        account = account_store.get_account(engine, name=name)
        assert account is not None and account.id is not None
        return account_place(PROJECT, fields, account_id=account.id, account_name=name)

    configs = config_service(settings, engine, AuditLog())
    # alice's active configuration is `prod`, with a secret; bob keeps his default.
    configs.create(place("alice"), "prod", {"threshold": 9, "token": SECRET}, WHO)
    configs.activate(place("alice"), "prod", WHO)
    try:
        with server.running():
            yield World(server, configs, alice, bob, place("alice"), place("bob"))
    finally:
        engine.dispose()


def api(world: World, key: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        base_url=world.server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
    )


async def call_show(
    world: World, key: str, config: str | None = None, mode: str = "legacy"
) -> dict[str, Any]:
    async with sdk_client(world.url(config), key, mode) as client:
        return payload(await client.call_tool("show", {}))


async def test_each_account_calls_with_its_own_active_configuration(world: World) -> None:
    alice = await call_show(world, world.alice)
    bob = await call_show(world, world.bob)
    assert alice["output"] == {**DEFAULTS, "threshold": 9, "token": SECRET}  # the handler reads it in clear
    assert bob["output"] == DEFAULTS
    async with api(world, world.alice) as http:
        run = (await http.get(f"/api/runs/{alice['runId']}")).json()["data"]
    assert run["configuration"] == {"name": "prod", "revision": 1}


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # a 2025 session; 2026 stateless requests
async def test_the_config_parameter_picks_a_configuration_of_the_calling_account(
    world: World, mode: str
) -> None:
    assert (await call_show(world, world.alice, "default", mode))["output"] == DEFAULTS
    assert (await call_show(world, world.alice, None, mode))["output"]["threshold"] == 9
    # bob has no `prod`: alice's configurations are not his.
    refused = await call_show(world, world.bob, "prod", mode)
    assert refused["status"] == "failed" and "runId" not in refused
    assert refused["error"]["code"] == "config_not_found"
    assert "'prod'" in refused["error"]["message"] and "account bob" in refused["error"]["message"]


async def test_a_bad_configuration_name_is_400(world: World) -> None:
    async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
        r = await http.post(world.url("bad%20name"), headers=headers(world.alice), json=init_body())
    assert r.status_code == 400
    assert "not a valid configuration name" in r.json()["error"]["message"]


async def open_session(http: httpx2.AsyncClient, url: str, key: str) -> str:
    r = await http.post(url, headers=headers(key), json=init_body())
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, headers=headers(key, sid), json=note)).status_code == 202
    return sid


async def test_the_configuration_is_bound_into_the_session_like_the_target(world: World) -> None:
    tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
        picked = await open_session(http, world.url("default"), world.alice)
        plain = await open_session(http, world.url(), world.alice)
        for url, sid in [
            (world.url(), picked),
            (world.url("prod"), picked),
            (world.url("default"), plain),
        ]:
            r = await http.post(url, headers=headers(world.alice, sid), json=tools_list)
            assert r.status_code == 403, r.text
            assert "configuration" in r.json()["error"]["message"]
        for url, sid in [(world.url("default"), picked), (world.url(), plain)]:
            r = await http.post(url, headers=headers(world.alice, sid), json=tools_list)
            assert r.status_code == 200, r.text
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "show", "arguments": {}},
        }
        r = await http.post(world.url("default"), headers=headers(world.alice, picked), json=call)
        assert sse_json(r)["result"]["structuredContent"]["output"] == DEFAULTS
    with Session(world.configs.engine) as s:
        denied = s.exec(select(AuditEvent).where(AuditEvent.event == "session.denied")).all()
        created = s.exec(select(AuditEvent).where(AuditEvent.session_id == picked)).all()
    assert len(denied) == 3
    assert {"config": "default"} in [e.details for e in created if e.event == "session.created"]


def test_the_typescript_client_reads_the_configuration(world: World, node: str) -> None:
    doc, stderr = run_client_script(
        node,
        "http_client.mjs",
        ["--url", world.url("prod")],
        [call("show")],
        env={**os.environ, "MCP_KEY": world.alice},
    )
    (step,) = doc["steps"]
    assert step["result"]["isError"] is False, stderr
    assert tool_payload(step)["output"] == {**DEFAULTS, "threshold": 9, "token": SECRET}


async def test_a_waiting_run_keeps_the_configuration_it_started_with(world: World) -> None:
    place = world.alice_place
    before = world.configs.show(place, "prod")
    async with sdk_client(world.url(), world.alice, "legacy") as client:
        waiting = payload(await client.call_tool("ask_then_show", {}))
    assert waiting["error"]["code"] == "interaction_required"
    run_id = waiting["runId"]
    # While the run waits, alice changes the configuration it started with.
    world.configs.set(place, "prod", revision=before.revision, values={"threshold": 42}, who=WHO)
    assert world.configs.show(place, "prod").revision == before.revision + 1
    async with api(world, world.alice) as http:
        r = await http.post(
            f"/api/interactions/{waiting['error']['interactionId']}/answer",
            json={"action": "accept", "content": {"ok": True}},
        )
        assert r.status_code == 200, r.text
        with anyio.fail_after(TIMEOUT):
            run = await _wait_run(http, run_id)
        raw = (await http.get(f"/api/runs/{run_id}")).text
    assert run["status"] == "success"
    assert run["output"]["threshold"] == 9  # the snapshot, not the new revision's 42
    assert run["output"]["token"] and run["output"]["token"] != SECRET  # the handler saw it (hashed)
    assert run["configuration"] == {"name": "prod", "revision": before.revision}
    with Session(world.configs.engine) as s:
        row = s.get(Run, run_id)
        audit = json.dumps([e.model_dump(mode="json") for e in s.exec(select(AuditEvent)).all()])
    assert row is not None and (row.config_name, row.config_revision) == ("prod", before.revision)
    assert SECRET not in raw and SECRET not in json.dumps(row.config_values)
    assert SECRET not in audit
    # The admin's full view of the run (events included) holds no secret either.
    async with api(world, world.server.admin_key) as http:
        assert SECRET not in (await http.get(f"/api/runs/{run_id}")).text
