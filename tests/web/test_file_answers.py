"""Questions with file and date-time fields, answered from the browser: uploads through the
files API with the browser session (what the file picker does), answers that name files of
the run's project only, and date-times stored as the instant the person meant."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.web.conftest import (
    HELLO,
    INTERACTIVE,
    LEDGER,
    USER,
    Web,
    next_step,
    rendered,
    services,
    start_asking,
)
from webui.store import files as file_store

HX = {"HX-Request": "true"}
HANDLERS = """
def pick_files(ctx):
    answer = ctx.ask(
        "Send the files",
        [
            {"name": "form", "type": "file", "required": True},
            {"name": "extras", "type": "file", "multiple": True},
        ],
    )
    return {"answer": answer}


def pick_time(ctx):
    when = {"name": "when", "type": "string", "format": "date-time", "required": True}
    return {"answer": ctx.ask("When?", [when])}
"""


@pytest.fixture
def asking(tmp_path: Path) -> Path:
    """The interactive example (so the person may use it) with two more questions."""
    folder = tmp_path / "interactive"
    shutil.copytree(EXAMPLES / "interactive", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "asks.py").write_text(HANDLERS, encoding="utf-8")
    doc = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    for name in ("pick_files", "pick_time"):
        doc["entrypoints"].append({"id": name, "title": name, "handler": f"asks.py:{name}", "params": []})
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def upload(web: Web, project_id: str, name: str, data: bytes, headers: dict[str, str]) -> Any:
    return web.client.post(
        f"/api/workflows/{project_id}/files",
        params={"fileName": name, "mimeType": "text/plain"},
        content=data,
        headers={"Content-Type": "application/octet-stream", **headers},
    )


def answer(web: Web, csrf: str, interaction_id: str, data: dict[str, Any]) -> Any:
    return web.client.post(
        f"/interactions/{interaction_id}/answer", data=data, headers={"X-CSRF-Token": csrf, **HX}
    )


# --------------------------------------------------------------------------- uploads


def test_the_browser_session_uploads_with_its_csrf_token_into_a_project_it_may_use(web: Web) -> None:
    csrf = web.login(*USER)
    r = upload(web, INTERACTIVE, "note.txt", b"hello", {"X-CSRF-Token": csrf})
    assert r.status_code == 201, r.text
    [row] = r.json()["data"]
    assert re.fullmatch(r"wf_[0-9a-f]{16}", row["id"]) and (row["name"], row["size"]) == ("note.txt", 5)
    stored = services(web).files.get(row["id"])
    assert stored is not None and stored.project_id == INTERACTIVE


@pytest.mark.shares_app
def test_an_upload_without_the_csrf_token_or_login_or_access_stores_nothing(web: Web) -> None:
    anonymous = upload(web, INTERACTIVE, "a.txt", b"x", {})
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"]
    csrf = web.login(*USER)
    forged = upload(web, INTERACTIVE, "a.txt", b"x", {})
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "csrf"
    wrong = upload(web, INTERACTIVE, "a.txt", b"x", {"X-CSRF-Token": "not-it"})
    assert wrong.status_code == 403
    # a project she may not use answers as an unknown one
    hidden = upload(web, LEDGER, "a.txt", b"x", {"X-CSRF-Token": csrf})
    unknown = upload(web, "no-such-project", "a.txt", b"x", {"X-CSRF-Token": csrf})
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["error"]["message"] == f"project {LEDGER!r} is not registered"
    assert file_store.usage(services(web).engine, project_id=INTERACTIVE) == (0, 0)


@pytest.mark.shares_app
def test_a_file_over_the_limit_is_refused_by_its_declared_size(web: Web) -> None:
    csrf = web.login(*USER)
    limit = web.settings.max_file_bytes
    r = web.client.post(
        f"/api/workflows/{INTERACTIVE}/files?fileName=big.bin",
        content=b"x",
        headers={
            "Content-Type": "application/octet-stream",
            "X-CSRF-Token": csrf,
            "Content-Length": str(limit + 1),
        },
    )
    assert r.status_code == 413 and "50 MB" in r.json()["error"]["message"]


# --------------------------------------------------------------------------- answers


def test_a_file_question_renders_a_picker_over_the_id_fields(web: Web, asking: Path) -> None:
    _, iid = start_asking(web, asking, "pick_files")
    web.login(*USER)
    r = web.client.get("/inbox")
    [card] = rendered(r).context["cards"]
    assert [(f.name, f.widget, f.required) for f in card.fields] == [
        ("form", "file_id", True),
        ("extras", "file_ids", False),
    ]
    p = f"{iid}-"
    html = r.text
    upload_url = f"/api/workflows/{INTERACTIVE}/files"
    single = re.search(rf'<div class="file-picker" id="{p}form-picker"[^>]*>', html)
    assert single and f'data-upload="{upload_url}"' in single.group(0)
    assert f'data-max-bytes="{web.settings.max_file_bytes}"' in single.group(0) and " hidden" in single.group(
        0
    )
    assert re.search(rf'<input type="file" id="{p}form-file"[^>]*>', html)
    assert re.search(rf'<input type="file" id="{p}extras-file" multiple', html)
    # without script, the id fields are what a person fills
    assert re.search(
        rf'<input id="{p}form" name="{p}form" type="text" placeholder="wf_…" data-file-ids', html
    )
    assert re.search(rf'<textarea id="{p}extras" name="{p}extras" placeholder="wf_… \(one per line\)"', html)


def test_an_answer_with_uploaded_files_resumes_the_run_with_their_ids(web: Web, asking: Path) -> None:
    run_id, iid = start_asking(web, asking, "pick_files")
    csrf = web.login(*USER)
    ids = [
        upload(web, INTERACTIVE, f"{n}.txt", n.encode(), {"X-CSRF-Token": csrf}).json()["data"][0]["id"]
        for n in "abc"
    ]
    data = {"action": "accept", f"{iid}-form": ids[0], f"{iid}-extras": f"{ids[1]}\n{ids[2]}\n"}
    r = answer(web, csrf, iid, data)
    assert r.status_code == 200, r.text
    final = next_step(web, run_id)
    assert final.status == "success"
    assert final.output == {"answer": {"form": {"id": ids[0]}, "extras": [{"id": ids[1]}, {"id": ids[2]}]}}


def test_file_ids_of_another_project_or_unknown_ones_are_refused_and_the_question_stays(
    web: Web, asking: Path
) -> None:
    _, iid = start_asking(web, asking, "pick_files")
    csrf = web.login(*USER)
    mine = upload(web, INTERACTIVE, "mine.txt", b"m", {"X-CSRF-Token": csrf}).json()["data"][0]["id"]
    elsewhere = upload(web, HELLO, "other.txt", b"o", {"X-CSRF-Token": csrf}).json()["data"][0]["id"]
    for form_id, extras in ((elsewhere, ""), (mine, "wf_0000000000000000"), ("not-an-id", "")):
        r = answer(web, csrf, iid, {"action": "accept", f"{iid}-form": form_id, f"{iid}-extras": extras})
        assert r.status_code == 422, r.text
        card = rendered(r).context["card"]
        assert card.pending and card.problem
        assert "unknown file id" in card.problem or card.errors
        if form_id == elsewhere:
            assert card.problem == f"invalid answer: form: unknown file id {elsewhere!r} for this project"
    assert services(web).interactions.get(iid).status == "pending"


@pytest.mark.shares_app
def test_the_schema_of_a_file_question_asks_for_uploads(web: Web, asking: Path) -> None:
    _, iid = start_asking(web, asking, "pick_files")
    row = services(web).interactions.get(iid)
    assert row.requested_schema["properties"]["form"]["type"] == "object"
    assert row.requested_schema["properties"]["extras"]["items"]["required"] == ["id"]
    assert row.blockers == ["'form' is a file field", "'extras' is a file field"]


@pytest.mark.shares_app
def test_a_date_time_answer_is_stored_as_the_instant_the_browser_meant(web: Web, asking: Path) -> None:
    run_id, iid = start_asking(web, asking, "pick_time")
    csrf = web.login(*USER)
    html = web.client.get("/inbox").text
    p = f"{iid}-"
    assert re.search(rf'<input id="{p}when" name="{p}when" type="datetime-local"', html)
    assert f'<input type="hidden" name="tzoffset:{p}when" value="" data-tz-offset-for="{p}when">' in html
    bad = answer(
        web, csrf, iid, {"action": "accept", f"{p}when": "2026-03-01T09:30", f"tzoffset:{p}when": "x"}
    )
    assert bad.status_code == 422 and rendered(bad).context["card"].errors == {
        "when": "not a valid time zone offset"
    }
    r = answer(
        web, csrf, iid, {"action": "accept", f"{p}when": "2026-03-01T09:30", f"tzoffset:{p}when": "330"}
    )
    assert r.status_code == 200, r.text
    final = next_step(web, run_id)
    assert final.output == {"answer": {"when": "2026-03-01T04:00:00Z"}}
    assert services(web).interactions.get(iid).answer == {"when": "2026-03-01T04:00:00Z"}
