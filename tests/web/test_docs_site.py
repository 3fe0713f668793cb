"""`/help/` serves the built documentation site (`scripts/docs build`), and says how to build
it where it is not built."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from webui.web.api_docs import DocsSite


def _client(directory: Path) -> TestClient:
    return TestClient(Starlette(routes=[Mount("/help", DocsSite(directory))]))


def test_a_site_not_built_says_how_to_build_it(tmp_path: Path) -> None:
    r = _client(tmp_path / "html").get("/help/")
    assert r.status_code == 404
    assert "scripts/docs build" in r.text and 'href="/docs"' in r.text


def test_the_built_site_is_served_once_it_is_there(tmp_path: Path) -> None:
    site = tmp_path / "html"
    client = _client(site)
    assert client.get("/help/").status_code == 404
    (site / "server-api").mkdir(parents=True)
    (site / "index.html").write_text("<h1>Home</h1>")
    (site / "server-api/ping.html").write_text("<h1>ping</h1>")
    assert client.get("/help/").text == "<h1>Home</h1>"
    assert client.get("/help/server-api/ping.html").text == "<h1>ping</h1>"
    assert client.get("/help/../pyproject.toml").status_code == 404
