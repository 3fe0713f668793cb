"""Configurations reaching runs through what `steamharness mcp` serves (Python SDK client, in
memory: tests/support/memory.py): the local scope's active configuration at call time,
`--config NAME`, and every refusal (a bad `--config` through the real process)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from tests import processes
from tests.helpers import WAIT
from tests.mcp.test_stdio_protocol import STEAMHARNESS, in_memory, payload
from webui.audit.log import AuditLog
from webui.configs.model import ConfigPlace, Who
from webui.configs.places import local_place
from webui.configs.service import ConfigService
from webui.services import config_service
from webui.settings import Settings
from webui.store.db import make_engine
from webui.store.models import AuditEvent, Run

pytestmark = pytest.mark.anyio

PROJECT_ID = "3d6f1c2a-9b8e-4c7d-a6f5-0e1d2c3b4a59"
FIELDS: list[dict[str, Any]] = [
    {"name": "endpoint", "type": "string", "required": True, "default": "https://a.example"},
    {"name": "threshold", "type": "number", "default": 3},
    {"name": "token", "type": "secret"},
]
DEFAULTS = {"endpoint": "https://a.example", "threshold": 3, "token": None}
WHO = Who(actor="tester")
SECRET = "s3cret-value-42"


def write_project(root: Path, fields: list[dict[str, Any]]) -> None:
    doc = {
        "id": PROJECT_ID,
        "name": "configured",
        "version": "1.0.0",
        "projectType": "workflow",
        "configuration": {"fields": fields},
        "entrypoints": [
            {
                "id": "show",
                "title": "Show",
                "description": "Return the configuration.",
                "handler": "h.py:show",
            }
        ],
    }
    (root / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    (root / "h.py").write_text("def show(ctx):\n    return dict(ctx.config)\n", encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    write_project(root, FIELDS)
    return root


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def configs(data_dir: Path, database_url: str) -> Iterator[ConfigService]:
    """The local scope's service in this process, on the same store as the `mcp` process
    (started with `store(configs)`)."""
    settings = Settings(data_dir=data_dir, database_url=database_url)
    engine = make_engine(settings.resolved_database_url)
    try:
        yield config_service(settings, engine, AuditLog())
    finally:
        engine.dispose()


def store(configs: ConfigService) -> dict[str, Any]:
    """The setting (`--database-url`) for the store `configs` uses."""
    return {"database_url": configs.engine.url.render_as_string(hide_password=False)}


def runs_of(configs: ConfigService) -> list[Run]:
    with Session(configs.engine) as s:
        return list(s.exec(select(Run).order_by(col(Run.created_at))).all())


def audit_text(configs: ConfigService) -> str:
    with Session(configs.engine) as s:
        return json.dumps([r.model_dump(mode="json") for r in s.exec(select(AuditEvent)).all()])


async def call_show(project: Path, data_dir: Path, **options: Any) -> tuple[bool, dict[str, Any]]:
    async with in_memory(project, data_dir, "auto", **options) as client:
        result = await client.call_tool("show", {})
    return bool(result.is_error), payload(result)


async def test_calls_use_the_active_configuration_at_call_time(
    project: Path, data_dir: Path, configs: ConfigService
) -> None:
    place = local_place(project)
    async with in_memory(project, data_dir, "auto", **store(configs)) as client:
        first = payload(await client.call_tool("show", {}))
        configs.create(place, "prod", {"threshold": 9, "token": SECRET}, WHO)
        configs.activate(place, "prod", WHO)
        second = payload(await client.call_tool("show", {}))
        configs.set(place, "prod", revision=1, values={"threshold": 10}, who=WHO)
        third = payload(await client.call_tool("show", {}))
    assert first["output"] == DEFAULTS
    assert second["output"] == {**DEFAULTS, "threshold": 9, "token": SECRET}
    assert third["output"] == {**DEFAULTS, "threshold": 10, "token": SECRET}
    recorded = [(r.config_name, r.config_revision) for r in runs_of(configs)]
    assert recorded == [("default", 1), ("prod", 1), ("prod", 2)]
    # The secret reached the handler in clear, but is sealed in the run row and absent from the audit log.
    assert SECRET not in json.dumps([r.config_values for r in runs_of(configs)])
    assert SECRET not in audit_text(configs)


async def test_config_option_picks_a_configuration_other_than_the_active_one(
    project: Path, data_dir: Path, configs: ConfigService
) -> None:
    place = local_place(project)
    configs.create(place, "prod", {"threshold": 9}, WHO)
    configs.activate(place, "prod", WHO)
    assert (await call_show(project, data_dir, **store(configs), config_name="default"))[1][
        "output"
    ] == DEFAULTS
    picked = (await call_show(project, data_dir, **store(configs), config_name="prod"))[1]["output"]
    assert picked == {**DEFAULTS, "threshold": 9}


async def test_a_picked_configuration_deleted_meanwhile_fails_the_call_clearly(
    project: Path, data_dir: Path, configs: ConfigService
) -> None:
    place = local_place(project)
    configs.create(place, "prod", {"threshold": 9}, WHO)
    async with in_memory(project, data_dir, "auto", **store(configs), config_name="prod") as client:
        configs.delete(place, "prod", revision=1, who=WHO)
        result = await client.call_tool("show", {})
    body = payload(result)
    assert result.is_error is True and body["status"] == "failed" and "runId" not in body
    assert body["error"]["code"] == "config_not_found"
    assert "'prod'" in body["error"]["message"]
    assert runs_of(configs) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [("nosuch", "has no configuration 'nosuch'"), ("bad name", "is not a valid configuration name")],
)
def test_an_unknown_or_malformed_config_option_fails_at_start_in_one_line(
    project: Path, data_dir: Path, name: str, message: str
) -> None:
    proc = processes.run(
        [STEAMHARNESS, "mcp", str(project), "--data-dir", str(data_dir), "--config", name],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steamharness: error: --config"), proc.stderr
    assert message in lines[0]


async def test_a_configuration_the_fields_outgrew_refuses_the_call_naming_the_field(
    project: Path, data_dir: Path, configs: ConfigService
) -> None:
    assert (await call_show(project, data_dir, **store(configs)))[1]["output"] == DEFAULTS
    write_project(
        project, [*FIELDS, {"name": "region", "type": "select", "options": ["eu"], "required": True}]
    )
    is_error, body = await call_show(project, data_dir, **store(configs))
    assert is_error and body["status"] == "failed" and "runId" not in body
    assert body["error"]["code"] == "config_invalid"
    assert body["error"]["fields"] == {"region": "is required"}
    assert "region" in body["error"]["message"] and "'default'" in body["error"]["message"]
    assert len(runs_of(configs)) == 1  # the refused call created no run
    with Session(configs.engine) as s:
        failed = s.exec(select(AuditEvent).where(AuditEvent.event == "tool.failed")).all()
    assert [(e.outcome, e.details) for e in failed] == [("config_invalid", {"fields": ["region"]})]
    # Fixing the configuration lets calls run again.
    place: ConfigPlace = local_place(project)
    configs.set(place, "default", revision=1, values={"region": "eu"}, who=WHO)
    assert (await call_show(project, data_dir, **store(configs)))[1]["output"] == {**DEFAULTS, "region": "eu"}
