"""The audit page's address holds only the filters that say something: an htmx swap pushes
the clean address (HX-Push-Url), a plain form GET with empty fields is sent on to it."""

from __future__ import annotations

import pytest

from tests.web.conftest import ADMIN, Web, rendered

pytestmark = pytest.mark.shares_app  # both only read

HX = {"HX-Request": "true"}


def test_an_htmx_filter_pushes_only_the_non_empty_filters(web: Web) -> None:
    web.login(*ADMIN)
    r = web.client.get(
        "/admin/audit?event=&project=&actor=admin&session=&run=&outcome=&since=&until=", headers=HX
    )
    assert r.status_code == 200 and rendered(r).block == "results"
    assert r.headers["hx-push-url"] == "/admin/audit?actor=admin"
    nothing = web.client.get("/admin/audit?event=&actor=", headers=HX)
    assert nothing.headers["hx-push-url"] == "/admin/audit"
    # a time is pushed as the page reads it back; a refused one as typed, with its 422
    timed = web.client.get("/admin/audit?since=2026-01-05T09:00&until=", headers=HX)
    assert timed.headers["hx-push-url"] == "/admin/audit?since=2026-01-05T09%3A00%3A00"
    bad = web.client.get("/admin/audit?since=soon&actor=", headers=HX)
    assert bad.status_code == 422 and bad.headers["hx-push-url"] == "/admin/audit?since=soon"


def test_a_plain_form_get_with_empty_fields_is_sent_on_to_the_clean_address(web: Web) -> None:
    web.login(*ADMIN)
    r = web.client.get("/admin/audit?event=&actor=admin&outcome=", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/admin/audit?actor=admin"
    assert "hx-push-url" not in r.headers
    clean = web.client.get("/admin/audit?actor=admin")
    assert clean.status_code == 200 and rendered(clean).context["values"]["actor"] == "admin"
    assert web.client.get("/admin/audit?event=", follow_redirects=False).headers["location"] == "/admin/audit"
    # a history restore is answered in place, as before
    restore = web.client.get("/admin/audit?event=", headers={**HX, "HX-History-Restore-Request": "true"})
    assert restore.status_code == 200 and "<html" in restore.text
