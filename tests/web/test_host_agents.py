"""Agents on the host pages: listed on /host/servers, chosen when a conversation starts, and a
conversation keeps the selection it started with when the agent file changes later."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web.conftest import USER, rendered
from tests.web.test_host_pages import Host, create, start, stdio, write_root

AGENTS = {
    "inherit.yaml": "kind: agent\nid: agent-inherit\nname: Inherits\nmcp_servers: null\n",
    "none.yaml": "kind: agent\nid: agent-none\nname: Nothing\nmcp_servers: []\n",
    "both.yml": "kind: agent\nid: agent-both\nname: Both servers\n"
    "mcp_servers: [mcp-other-server, mcp-test-stdio]\n",
}


def write_agents(root: Path, agents: dict[str, str]) -> None:
    (root / "agents").mkdir(exist_ok=True)
    for name, body in agents.items():
        (root / "agents" / name).write_text(body, encoding="utf-8")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    root = tmp_path / "root"
    write_root(
        root, {"Test_Stdio": stdio(), "Other Server": stdio()}, "defaults:\n  mcp_servers: [mcp-test-stdio]\n"
    )
    write_agents(root, AGENTS)
    yield from start(tmp_path, root=root)


def test_agents_are_listed_on_the_servers_page_and_offered_in_the_form(host: Host) -> None:
    host.web.login(*USER)
    page = host.client.get("/host/servers").text
    assert '<section id="agents"' in page
    assert '<tr id="agent-agent-inherit">' in page and "the defaults" in page
    assert '<tr id="agent-agent-none">' in page
    both = page.split('<tr id="agent-agent-both">', 1)[1].split("</tr>", 1)[0]
    assert "<code>mcp-other-server</code>, <code>mcp-test-stdio</code>" in both
    form = host.client.get("/host/conversations").text
    assert 'name="selection" value="agent"' in form and 'name="selection" value="defaults" checked' in form
    for aid in ("agent-inherit", "agent-none", "agent-both"):
        assert f'<option value="{aid}"' in form


def test_a_conversation_from_an_agent_keeps_the_defaults_none_or_the_list(host: Host) -> None:
    csrf = host.web.login(*USER)
    inherit = create(host, csrf, "inherits", selection="agent", agent="agent-inherit")
    none = create(host, csrf, "nothing", selection="agent", agent="agent-none")
    both = create(host, csrf, "both", selection="agent", agent="agent-both")
    # an agent chosen in the list while another mode is picked does not decide
    defaults = create(host, csrf, "defaults", selection="defaults", agent="agent-none")
    svc = host.service
    assert svc.conversation(inherit).selection == ["mcp-test-stdio"]
    assert svc.conversation(none).selection == []
    assert svc.conversation(both).selection == ["mcp-other-server", "mcp-test-stdio"]
    assert svc.conversation(defaults).selection == ["mcp-test-stdio"]
    sections = rendered(host.client.get(f"/host/conversations/{both}")).context["sections"]
    assert [x.id for x in sections] == ["mcp-other-server", "mcp-test-stdio"]
    assert rendered(host.client.get(f"/host/conversations/{none}")).context["sections"] == []


def test_editing_an_agent_or_the_defaults_later_does_not_change_existing_conversations(host: Host) -> None:
    csrf = host.web.login(*USER)
    inherit = create(host, csrf, "inherits", selection="agent", agent="agent-inherit")
    both = create(host, csrf, "both", selection="agent", agent="agent-both")
    write_agents(
        host.root,
        {
            "inherit.yaml": "kind: agent\nid: agent-inherit\nname: Inherits\n"
            "mcp_servers: [mcp-other-server]\n",
            "both.yml": "kind: agent\nid: agent-both\nname: Both servers\nmcp_servers: []\n",
        },
    )
    (host.root / "config.yaml").write_text("defaults:\n  mcp_servers: [mcp-other-server]\n", encoding="utf-8")
    svc = host.service
    assert svc.conversation(inherit).selection == ["mcp-test-stdio"]
    assert svc.conversation(both).selection == ["mcp-other-server", "mcp-test-stdio"]
    sections = rendered(host.client.get(f"/host/conversations/{both}")).context["sections"]
    assert [x.id for x in sections] == ["mcp-other-server", "mcp-test-stdio"]
    # new conversations use the files as they are now
    again = create(host, csrf, "both again", selection="agent", agent="agent-both")
    assert svc.conversation(again).selection == []
    inherit_again = create(host, csrf, "inherits again", selection="agent", agent="agent-inherit")
    assert svc.conversation(inherit_again).selection == ["mcp-other-server"]


def test_an_unknown_or_missing_agent_is_refused_and_the_form_keeps_the_values(host: Host) -> None:
    csrf = host.web.login(*USER)
    before = len(host.service.conversations(None))
    r = host.client.post(
        "/host/conversations",
        data={"title": "ghost", "selection": "agent", "agent": "agent-gone", "csrf_token": csrf},
    )
    assert r.status_code == 422 and "no configured agent has id &#39;agent-gone&#39;" in r.text
    assert rendered(r).context["values"] == {
        "title": "ghost",
        "mode": "agent",
        "servers": [],
        "agent": "agent-gone",
    }
    assert 'name="selection" value="agent" checked' in r.text
    r = host.client.post(
        "/host/conversations", data={"title": "none", "selection": "agent", "csrf_token": csrf}
    )
    assert r.status_code == 422 and "Choose an agent." in r.text
    r = host.client.post(
        "/host/conversations", data={"title": "odd", "selection": "robot", "csrf_token": csrf}
    )
    assert r.status_code == 422 and "Choose an agent, the defaults or some servers." in r.text
    assert len(host.service.conversations(None)) == before


def test_a_broken_agent_file_is_a_configuration_problem_on_the_pages(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_root(root, {"Test_Stdio": stdio()}, "")
    write_agents(root, {"bad.yaml": "kind: agent\nid: agent-bad\nname: Bad\nmcp_servers: [mcp-nope]\n"})
    for host in start(tmp_path, root=root):
        csrf = host.web.login(*USER)
        page = host.client.get("/host/servers").text
        assert "agent-bad: mcp_servers[0]: no configured MCP server has id &#39;mcp-nope&#39;" in page
        assert '<section id="agents"' not in page
        listing = host.client.get("/host/conversations").text
        assert "The MCP server configuration has problems" in listing
        r = host.client.post(
            "/host/conversations",
            data={"title": "x", "selection": "agent", "agent": "agent-bad", "csrf_token": csrf},
        )
        assert r.status_code == 422
        assert host.service.conversations(None) == []
