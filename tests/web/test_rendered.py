"""The page tests' `rendered` helper: what a TestClient response was rendered from, for
whole pages and htmx blocks alike, and a clear failure for anything else."""

from __future__ import annotations

import pytest

from tests.web.conftest import USER, Web, rendered

pytestmark = pytest.mark.shares_app  # both only read


def test_a_whole_page_and_its_htmx_block_report_the_same_template_and_context(web: Web) -> None:
    web.login(*USER)
    page = web.client.get("/keys")
    block = web.client.get("/keys", headers={"HX-Request": "true"})
    assert rendered(page)[:2] == ("keys/list.html", None)
    assert rendered(block)[:2] == ("keys/list.html", "keys_panel")
    assert set(rendered(page).context) == set(rendered(block).context)
    assert rendered(block).context["user"].name == USER[0]  # what page() adds for every template


def test_a_response_not_rendered_from_a_template_is_refused_with_its_request(web: Web) -> None:
    redirect = web.client.get("/projects", follow_redirects=False)
    with pytest.raises(AssertionError, match=r"GET http://127\.0\.0\.1/projects -> 303"):
        rendered(redirect)
    with pytest.raises(AssertionError, match="not rendered from a template"):
        rendered(web.client.get("/api/runs/nope"))
