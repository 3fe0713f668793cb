"""Attack pass on issue 38's new surfaces: the download of a file a run created, as someone
other than the run's account.

A run's configuration secrets are hidden from anyone but its own account wherever the run
is shown (`webui.web.runs_pages.RunRedaction`): the run page lists a created file under its
name with them redacted. The download's `Content-Disposition` (what the browser saves the
file as, whatever the link's text) must hide them the same way: another account granted the
project, or an administrator, never gets the secret through a file's name.

In-process (the page-test app behind a TestClient), reusing the download tests' site."""

from __future__ import annotations

from urllib.parse import unquote

from tests.security.test_created_file_downloads import Site, add_file, prepared_account, site, url
from tests.web.conftest import HELLO, rendered, services
from webui.store import runs as run_store
from webui.store.models import Run

__all__ = ["site"]  # the fixture, used by name

SECRET = "sk-live-9f8e7d6c5b4a39281706"


def configured_run(site: Site) -> str:
    """alice's run that started with a sealed (secret) configuration value."""
    svc = services(site.web)
    account = prepared_account(site.web, "alice")
    sealed = svc.configs.box.seal(SECRET, binding=f"{HELLO}/{account}/token")
    run = Run(
        id="run-configured38",
        project_id=HELLO,
        entrypoint_id="greet",
        entrypoint_title="Greet",
        status="success",
        source="mcp",
        actor="user:alice",
        account_id=account,
        config_name="prod",
        config_revision=1,
        config_values={"token": sealed},
    )
    run_store.create_run(svc.engine, run=run)
    return run.id


def test_a_created_files_name_never_carries_the_runs_secret_to_another_account(site: Site) -> None:
    run_id = configured_run(site)
    row = add_file(site.web, run_id, f"dump-{SECRET}.txt", b"data", "text/plain")
    link = url(run_id, row.id)
    # the run's own account gets the name as it is
    mine = site.get(link, "alice")
    assert mine.status_code == 200 and SECRET in unquote(mine.headers["content-disposition"])
    # the run page hides it from bob (granted the project)...
    site.login("bob")
    page = site.client.get(f"/runs/{run_id}")
    assert page.status_code == 200 and SECRET not in page.text
    assert [f.name for f in rendered(page).context["files"]] != [row.name]
    # ...and so does the download, by his session, his key, or the admin key
    by_session = site.client.get(link)
    site.client.cookies.clear()
    for r in (by_session, site.get(link, "bob"), site.get(link, "bob-read"), site.get(link, "admin")):
        assert r.status_code == 200 and r.content == b"data"
        shown = unquote(r.headers["content-disposition"])
        assert SECRET not in shown and SECRET[:12] not in shown, shown
