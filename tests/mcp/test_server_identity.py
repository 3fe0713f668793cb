"""The server's identity is the binding's project, on every path the SDK reads it from.

`WorkflowServer` serves every project from one SDK `Server`; the SDK reads the identity
from `name`/`version`/`title`/`description` (the legacy `initialize` result) and from the
public `server_info_stamp` (stamped into 2026-era results). These tests pin that both
follow the binding of the request being served, so an SDK upgrade that moves the reads
shows here rather than as one project answering with another's name."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from mcp.server.lowlevel import Server

from webui.mcp.binding import Binding, current_binding
from webui.mcp.server import WorkflowServer, build_server


def binding(project_id: str, version: str | None) -> Binding:
    project = SimpleNamespace(id=project_id, version="0.9.0", name=f"Project {project_id}", description="")
    return Binding(
        catalog=cast(Any, SimpleNamespace(project=project)), principal="p", transport="http", version=version
    )


def server() -> WorkflowServer:
    built = build_server(bridge=cast(Any, None), state_key=b"k" * 32, state_ttl=60.0)
    assert isinstance(built, WorkflowServer) and isinstance(built, Server)
    return built


def test_each_binding_stamps_its_own_project() -> None:
    srv = server()
    stamps = []
    for pid, version in (("alpha", "1.2.0"), ("beta", None)):
        token = current_binding.set(binding(pid, version))
        try:
            stamps.append(srv.server_info_stamp)
            assert (srv.name, srv.title) == (f"workflow-{pid}", f"Project {pid}")
        finally:
            current_binding.reset(token)
    assert stamps == [
        {"name": "workflow-alpha", "version": "1.2.0", "title": "Project alpha"},
        {"name": "workflow-beta", "version": "0.9.0", "title": "Project beta"},
    ]


def test_a_stamp_is_a_fresh_dict_the_caller_may_change() -> None:
    srv = server()
    token = current_binding.set(binding("alpha", "1.0.0"))
    try:
        first = srv.server_info_stamp
        first["name"] = "changed"
        assert srv.server_info_stamp["name"] == "workflow-alpha"
    finally:
        current_binding.reset(token)


def test_without_a_binding_the_constructor_identity_answers() -> None:
    srv = server()
    assert srv.name == "steamharness-workflow"
    assert srv.server_info_stamp["name"] == "steamharness-workflow"
