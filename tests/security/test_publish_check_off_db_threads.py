"""The web UI's publish and its preview import a draft's handlers (and compile its files) in
bounded children with no database thread held (issue 38, item 6): a draft whose import never
ends, published by as many requests as there are database threads, leaves another account's
request that needs the database answered while they are all still checking. The preview shows
the problems a publish would find, from the copy it shows."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
from pathlib import Path

from fastapi.testclient import TestClient

from tests.conftest import EXAMPLES
from tests.helpers import WAIT
from tests.security.test_knowledge_extraction import wait_until
from tests.web.conftest import ADMIN, USER, Web, prepare, rendered
from webui.admin import create_key
from webui.app import create_app
from webui.blocking import DB_THREADS
from webui.projects.registry import ProjectRegistry
from webui.settings import Settings
from webui.store import projects as project_store
from webui.store.db import make_engine

PROJECT = "5c1f0e2a-8d3b-4a7e-9f6c-0b2d4e6a8c1e"

# Sleeps through the check's own deadline (it catches it): only the parent's kill ends it.
NEVER_ENDS = """\
import time

while True:
    try:
        time.sleep(3600)
    except BaseException:
        pass
"""


def _draft(tmp_path: Path, settings: Settings, source: str) -> tuple[Path, str, str]:
    """The hello example registered as PROJECT with `source` at the top of its handler file;
    the draft folder, the handler file's name and ann's API key."""
    folder = tmp_path / "greeter"
    shutil.copytree(EXAMPLES / "hello", folder, ignore=shutil.ignore_patterns("__pycache__"))
    package = json.loads((folder / "package.json").read_text())
    package.update(id=PROJECT, name="greeter")
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    handler_file = folder / package["entrypoints"][0]["handler"].rpartition(":")[0]
    handler_file.write_text(source + handler_file.read_text(), encoding="utf-8")
    engine = make_engine(settings.resolved_database_url)
    try:
        ProjectRegistry(engine, settings.versions_dir, settings=settings).register(folder)
        raw, _ = create_key(engine, user=USER[0], projects=None, scopes=None, name="bystander")
    finally:
        engine.dispose()
    return folder, handler_file.name, raw


def _checks_under(folder: Path) -> list[int]:
    """The handler check's children at work in a copy under `folder` (their working folder)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if b"handlers:check_child" in cmdline and cwd.startswith(f"{folder}/"):
            found.append(int(name))
    return found


def test_publishes_of_an_import_that_never_ends_hold_no_database_thread(tmp_path: Path) -> None:
    # The check's bound far beyond the wait below: the old server held a database thread that long.
    settings = prepare(tmp_path / "data").model_copy(update={"handler_check_seconds": 4 * WAIT})
    folder, handler_name, bystander = _draft(tmp_path, settings, NEVER_ENDS)
    engine = make_engine(settings.resolved_database_url)
    try:
        revision = (
            ProjectRegistry(engine, settings.versions_dir, settings=settings).review_draft(PROJECT).revision
        )
    finally:
        engine.dispose()
    page = f"/projects/{PROJECT}/publish"
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        token = Web(client, settings).login(*ADMIN)
        form = {"csrf_token": token, "version": "", "revision": revision}
        with concurrent.futures.ThreadPoolExecutor(max_workers=DB_THREADS + 1) as pool:
            publishing = [pool.submit(client.post, page, data=form) for _ in range(DB_THREADS)]
            try:
                # As many publishes as database threads, each importing the draft now.
                wait_until(lambda: len(_checks_under(settings.versions_dir)) == DB_THREADS)
                # Another account's request that needs the database (its key is looked up there).
                asked = pool.submit(
                    client.get, "/api/whoami", headers={"Authorization": f"Bearer {bystander}"}
                )
                answer = asked.result(timeout=WAIT)  # a hang guard: the old server answered never
                assert answer.status_code == 200, answer.text
                assert answer.json()["data"]["actor"].endswith(USER[0])
                assert not any(p.done() for p in publishing)  # all still checking meanwhile
            finally:
                for pid in _checks_under(settings.versions_dir):  # the check's children ended here
                    os.kill(pid, signal.SIGKILL)
            posted = [p.result(timeout=WAIT) for p in publishing]
    for response in posted:  # each refused naming the draft's file, nothing stored or left
        assert response.status_code == 422, response.text
        error = rendered(response).context["error"]
        assert f"{folder}: the handlers in {handler_name} could not be checked: importing them" in error
    engine = make_engine(settings.resolved_database_url)
    try:
        assert project_store.list_versions(engine, project_id=PROJECT) == []
    finally:
        engine.dispose()
    assert not list((settings.versions_dir / PROJECT).iterdir())


def test_the_preview_shows_every_handler_problem_a_publish_would_find(tmp_path: Path) -> None:
    settings = prepare(tmp_path / "data")
    folder, handler_name, _ = _draft(tmp_path, settings, "")
    package = json.loads((folder / "package.json").read_text())
    package["entrypoints"][0]["handler"] = f"{handler_name}:mian"
    package["entrypoints"][1]["handler"] = "broken.py:echo"
    (folder / "broken.py").write_text("import json\n\nraise ValueError('boom')\n", encoding="utf-8")
    (folder / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        Web(client, settings).login(*ADMIN)
        shown = client.get(f"/projects/{PROJECT}/publish")
    assert shown.status_code == 422, shown.text
    preview = rendered(shown).context["publish"]
    assert preview.changes == [] and preview.revision
    problems = preview.problem.splitlines()  # both, each naming the draft's file (not the copy's)
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"{folder}/package.json:")
    assert (
        f"entrypoint greet, handler '{handler_name}:mian': {handler_name} defines no function 'mian'"
        in problems[0]
    )
    assert (
        problems[1]
        == f"{folder}/broken.py:3: importing broken.py (the handler file of echo): ValueError: boom"
    )
    assert "The draft cannot be published: " in shown.text
    assert 'action="/projects/' + PROJECT + '/publish"' not in shown.text  # no publish form
    assert not [p for p in settings.versions_dir.iterdir() if p.name.startswith(".review-")]
