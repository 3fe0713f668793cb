"""`steamharness configs …`: the local scope of a project folder and the server scopes (admin
principal, accounts) of a registered project. The commands run in this process
(`tests/cli_runner.py`, the same entry point, exit codes and streams); the secrets test runs
them as real processes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from tests import processes
from tests.cli_runner import run_cli
from tests.conftest import EXAMPLES
from tests.e2e.server import HELLO, STEAMHARNESS
from tests.helpers import WAIT

TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
PREFIX = "steamharness: error: "
PROJECT = "5f0c8a52-3a55-4f7b-9d0e-0a1b2c3d4e5f"
SECRET = "s3cret-value-never-printed"
FIELDS: list[dict[str, Any]] = [
    {"name": "endpoint", "type": "string", "required": True, "default": "https://a.example"},
    {"name": "threshold", "type": "number", "default": 3},
    {"name": "dry_run", "type": "boolean"},
    {"name": "region", "type": "select", "options": ["eu", "us"]},
    {"name": "tags", "type": "multiselect", "options": ["a", "b", "c"]},
    {"name": "start", "type": "date"},
    {"name": "token", "type": "secret"},
]


def configs(data: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`steamharness configs ARGS --data-dir DATA`, in this process (`tests/cli_runner.py`)."""
    return run_cli(["configs", *args, "--data-dir", str(data)], stdin=stdin or "", env=clean_env())


def clean_env() -> dict[str, str]:
    """This environment without its STEAMHARNESS_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}


def configs_process(data: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The same command as a real process (the tests that keep the operating system's argv,
    pipes and exit)."""
    return processes.run(
        [STEAMHARNESS, "configs", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        input=stdin if stdin is not None else "",
        env=clean_env(),
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def refused(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """A refusal: non-zero, one line on stderr naming what is wrong, nothing on stdout."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(PREFIX), done.stderr
    for needle in needles:
        assert needle in done.stderr, (needle, done.stderr)
    return done.stderr


def show(data: Path, project: str, name: str, *extra: str) -> dict[str, Any]:
    return json.loads(ok(configs(data, "show", project, name, "--json", *extra)).stdout)


def listing(data: Path, project: str, *extra: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(ok(configs(data, "list", project, "--json", *extra)).stdout)}


def write_project(folder: Path, fields: list[dict[str, Any]], **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"id": PROJECT, "name": "configured", "projectType": "conversation"} | extra
    doc["configuration"] = {"fields": fields}
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


@pytest.fixture
def project(tmp_path: Path) -> str:
    return str(write_project(tmp_path / "project", FIELDS))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


# ----------------------------------------------------------------- local scope


def test_create_show_set_rename_activate_delete_on_a_project_folder(project: str, data: Path) -> None:
    assert ok(configs(data, "list", project)).stdout == "* default  revision 1\n"
    created = ok(
        configs(
            data,
            "create",
            project,
            "prod",
            "threshold=9.5",
            "dry_run=yes",
            "region=us",
            "tags=a, c",
            "start=2026-01-31",
            "--secret",
            "token",
            stdin=SECRET + "\n",
        )
    )
    assert "created prod (revision 1)" in created.stderr and created.stdout == ""
    prod = show(data, project, "prod")
    assert prod["values"] == {
        "threshold": 9.5,
        "dry_run": True,
        "region": "us",
        "tags": ["a", "c"],
        "start": "2026-01-31",
        "token": "********",
    }
    assert (prod["revision"], prod["active"], prod["needsUpdate"]) == (1, False, False)
    text = ok(configs(data, "show", project, "prod")).stdout
    assert "token = ********" in text and "threshold = 9.5" in text and "revision: 1" in text
    assert 'endpoint = (default "https://a.example")' in text

    changed = ok(
        configs(data, "set", project, "prod", "--revision", "1", "threshold=4", "--unset", "start", "--json")
    )
    after = json.loads(changed.stdout)
    assert after["revision"] == 2 and after["values"]["threshold"] == 4 and "start" not in after["values"]
    assert after["values"]["token"] == "********"

    ok(configs(data, "copy", project, "prod", "staging"))
    ok(configs(data, "rename", project, "staging", "qa", "--revision", "1"))
    ok(configs(data, "activate", project, "qa"))
    lines = ok(configs(data, "list", project)).stdout.splitlines()
    assert lines == ["  default  revision 1", "  prod     revision 2", "* qa       revision 2"]
    listed = listing(data, project)
    assert listed["qa"]["active"] and listed["qa"]["values"]["token"] == "********"
    refused(configs(data, "delete", project, "qa", "--revision", "1"), "revision 2", "revision 1")
    ok(configs(data, "delete", project, "qa", "--revision", "2"))
    assert sorted(listing(data, project)) == ["default", "prod"]
    assert listing(data, project)["default"]["active"]  # deleting the active one falls back
    refused(configs(data, "show", project, "qa"), "no configuration 'qa'")
    refused(configs(data, "delete", project, "default", "--revision", "1"), "cannot be deleted")
    refused(configs(data, "create", project, "prod"), "already exists at revision 2")
    refused(configs(data, "create", project, "bad name!"), "'bad name!' is not valid")


def test_a_stale_write_is_a_conflict_naming_both_revisions_and_changes_nothing(
    project: str, data: Path
) -> None:
    ok(configs(data, "create", project, "prod", "threshold=1"))
    ok(configs(data, "set", project, "prod", "--revision", "1", "threshold=2"))
    stale = refused(configs(data, "set", project, "prod", "--revision", "1", "threshold=3"))
    assert "at revision 2" in stale and "read revision 1" in stale
    refused(configs(data, "rename", project, "prod", "other", "--revision", "1"), "revision 2", "revision 1")
    prod = show(data, project, "prod")
    assert (prod["revision"], prod["values"]["threshold"]) == (2, 2)


@pytest.mark.parametrize(
    "command", [["set", "prod", "threshold=2"], ["rename", "prod", "x"], ["delete", "prod"]]
)
def test_every_write_states_the_revision_it_read(project: str, data: Path, command: list[str]) -> None:
    ok(configs(data, "create", project, "prod"))
    verb, name, *rest = command
    refused(configs(data, verb, project, name, *rest), "--revision is required", "configs show")
    assert show(data, project, "prod")["revision"] == 1


def test_bad_values_name_every_field_and_nothing_is_written(project: str, data: Path) -> None:
    ok(configs(data, "create", project, "prod"))
    message = refused(
        configs(
            data,
            "set",
            project,
            "prod",
            "--revision",
            "1",
            "threshold=many",
            "dry_run=maybe",
            "region=mars",
            "tags=a,z",
            "start=31/01/2026",
            "colour=red",
        )
    )
    for field in ("threshold", "dry_run", "region", "tags", "start", "colour"):
        assert f"{field}: " in message, (field, message)
    assert "expected a number, got 'many'" in message and "unknown field" in message
    refused(configs(data, "create", project, "other", 'tags=["a", 1]'), "tags: ", "is not one of the options")
    refused(configs(data, "set", project, "prod", "--revision", "1", "threshold"), "expected FIELD=VALUE")
    refused(configs(data, "set", project, "prod", "--revision", "1"), "nothing to change")
    refused(
        configs(data, "set", project, "prod", "--revision", "1", "threshold=1", "--unset", "threshold"),
        "threshold: both set and unset",
    )
    refused(
        configs(data, "set", project, "prod", "--revision", "1", "threshold=1", "threshold=2"), "given twice"
    )
    assert show(data, project, "prod")["revision"] == 1
    assert sorted(listing(data, project)) == ["default", "prod"]
    ok(configs(data, "set", project, "prod", "--revision", "1", 'tags=["b","c"]', "dry_run=off"))
    assert show(data, project, "prod")["values"] == {"tags": ["b", "c"], "dry_run": False}


def test_a_secret_is_read_from_stdin_never_from_the_command_line(project: str, data: Path) -> None:
    """The secret's way in and out also through real processes: down a pipe into `create`,
    out of `export --with-secrets`."""
    argv = refused(
        configs(data, "create", project, "prod", f"token={SECRET}"),
        "token: is a secret",
        "--secret token",
    )
    assert SECRET not in argv
    refused(configs(data, "create", project, "prod", "--secret", "threshold"), "threshold: --secret")
    refused(configs(data, "create", project, "prod", "--secret", "token"), "stdin ended")
    twice = configs(data, "create", project, "prod", "--secret", "token", "--secret", "token", stdin="a\nb\n")
    refused(twice, "token: --secret given twice")
    refused(
        configs(data, "create", project, "prod", "--secret", "token", stdin="\n"),
        "the value is empty",
    )
    assert sorted(listing(data, project)) == ["default"]
    outputs = [
        ok(configs_process(data, "create", project, "prod", "--secret", "token", stdin=SECRET + "\n")),
        ok(configs(data, "show", project, "prod")),
        ok(configs(data, "show", project, "prod", "--json")),
        ok(configs(data, "list", project, "--json")),
        ok(configs(data, "copy", project, "prod", "copy", "--json")),
        ok(configs(data, "set", project, "prod", "--revision", "1", "threshold=1", "--json")),
        ok(configs(data, "export", project)),
    ]
    for done in outputs:
        assert SECRET not in done.stdout and SECRET not in done.stderr
    assert show(data, project, "copy")["values"]["token"] == "********"
    replaced = ok(
        configs(data, "set", project, "prod", "--revision", "2", "--secret", "token", stdin="new\n")
    )
    exported = json.loads(ok(configs_process(data, "export", project, "--with-secrets")).stdout)
    prod = next(c for c in exported["configurations"] if c["name"] == "prod")
    assert prod["values"]["token"] == "new" and "new" not in replaced.stdout + replaced.stderr


def test_the_cli_writes_the_local_scope_that_local_commands_read(project: str, data: Path) -> None:
    from webui.audit.log import AuditLog
    from webui.configs.places import local_place
    from webui.services import config_service
    from webui.settings import Settings
    from webui.store.db import make_engine

    ok(configs(data, "create", project, "prod", "threshold=8", "--secret", "token", stdin=SECRET + "\n"))
    ok(configs(data, "activate", project, "prod"))
    settings = Settings.model_validate({"data_dir": data, "server_admin_key": None})
    engine = make_engine(settings.resolved_database_url)
    try:
        snapshot = config_service(settings, engine, AuditLog()).snapshot(local_place(project))
    finally:
        engine.dispose()
    assert (snapshot.name, snapshot.revision) == ("prod", 1)
    assert snapshot.values["threshold"] == 8 and snapshot.values["token"] == SECRET
    assert snapshot.values["endpoint"] == "https://a.example"


def test_a_field_change_in_package_json_marks_configurations_as_needing_update(
    project: str, data: Path
) -> None:
    ok(configs(data, "create", project, "prod", "threshold=5", "region=eu"))
    changed = [f for f in FIELDS if f["name"] not in ("threshold", "region")]
    changed += [
        {"name": "threshold", "type": "string"},
        {"name": "region", "type": "select", "options": ["eu", "us"]},
        {"name": "owner", "type": "string", "required": True},
    ]
    write_project(Path(project), changed)
    lines = ok(configs(data, "list", project)).stdout.splitlines()
    assert "prod     revision 1  needs update (owner, threshold)" in lines[1], lines
    assert "default  revision 1  needs update (owner, threshold)" in lines[0], lines
    prod = show(data, project, "prod")
    assert prod["needsUpdate"] and set(prod["problems"]) == {"owner", "threshold"}
    text = ok(configs(data, "show", project, "prod")).stdout
    assert "needs update:\n  owner: is required\n  threshold: expected a string" in text
    refused(
        configs(data, "set", project, "prod", "--revision", "1", "region=us"),
        "owner: is required",
        "threshold",
    )
    ok(configs(data, "set", project, "prod", "--revision", "1", "threshold=5", "owner=ops"))
    assert not show(data, project, "prod")["needsUpdate"]


def test_a_folder_takes_no_account_and_a_target_must_be_a_folder_or_an_id(
    project: str, data: Path, tmp_path: Path
) -> None:
    refused(configs(data, "list", project, "--account", "alice"), "--account applies to a server project id")
    refused(configs(data, "list", "no-such-folder"), "neither an existing project folder nor a project id")
    refused(configs(data, "list", str(tmp_path)), "package.json")


# ----------------------------------------------------------------- export / import


def test_export_and_import_round_trip_with_and_without_secrets(
    project: str, data: Path, tmp_path: Path
) -> None:
    ok(configs(data, "create", project, "prod", "threshold=7", "--secret", "token", stdin=SECRET + "\n"))
    ok(configs(data, "activate", project, "prod"))
    plain = json.loads(ok(configs(data, "export", project)).stdout)
    assert plain["projectId"] == PROJECT and plain["active"] == "prod" and not plain["secretsIncluded"]
    prod = next(c for c in plain["configurations"] if c["name"] == "prod")
    assert "token" not in prod["values"] and prod["omittedSecrets"] == ["token"]

    secret_file = tmp_path / "with-secrets.json"
    exported = ok(configs(data, "export", project, "--with-secrets", "--output", str(secret_file)))
    assert exported.stdout == "" and "0600" in exported.stderr
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert SECRET in secret_file.read_text(encoding="utf-8")

    other = tmp_path / "other-data"
    imported = ok(configs(other, "import", project, str(secret_file)))
    assert "2 configuration(s); active: prod" in imported.stderr
    assert SECRET not in imported.stdout + imported.stderr
    copied = listing(other, project)
    assert copied["prod"]["active"] and copied["prod"]["values"]["threshold"] == 7
    assert copied["prod"]["values"]["token"] == "********"
    full = json.loads(ok(configs(other, "export", project, "--with-secrets")).stdout)
    assert next(c for c in full["configurations"] if c["name"] == "prod")["values"]["token"] == SECRET

    # Without secrets, from stdin: the stored secret of an existing configuration is kept.
    ok(configs(data, "import", project, "-", stdin=json.dumps(plain)))
    again = json.loads(ok(configs(data, "export", project, "--with-secrets")).stdout)
    assert next(c for c in again["configurations"] if c["name"] == "prod")["values"]["token"] == SECRET

    plain_file = tmp_path / "plain.json"
    ok(configs(data, "export", project, "-o", str(plain_file)))
    assert json.loads(plain_file.read_text(encoding="utf-8"))["secretsIncluded"] is False


def test_import_refuses_conflicts_unless_forced_and_replace_removes_the_rest(
    project: str, data: Path, tmp_path: Path
) -> None:
    ok(configs(data, "create", project, "prod", "threshold=1"))
    doc = tmp_path / "export.json"
    ok(configs(data, "export", project, "-o", str(doc)))
    ok(configs(data, "set", project, "prod", "--revision", "1", "threshold=2"))
    ok(configs(data, "create", project, "extra"))
    conflict = refused(
        configs(data, "import", project, str(doc)), "'prod'", "revision 2", "revision 1", "force"
    )
    assert "force" in conflict
    assert show(data, project, "prod")["values"]["threshold"] == 2
    ok(configs(data, "import", project, str(doc), "--force"))
    assert show(data, project, "prod")["values"]["threshold"] == 1
    assert sorted(listing(data, project)) == ["default", "extra", "prod"]  # merge keeps "extra"
    ok(configs(data, "export", project, "-o", str(doc)))
    ok(configs(data, "import", project, str(doc), "--mode", "replace"))
    assert sorted(listing(data, project)) == ["default", "extra", "prod"]
    body = json.loads(doc.read_text(encoding="utf-8"))
    body["configurations"] = [c for c in body["configurations"] if c["name"] != "extra"]
    doc.write_text(json.dumps(body), encoding="utf-8")
    ok(configs(data, "import", project, str(doc), "--mode", "replace", "--force"))
    assert sorted(listing(data, project)) == ["default", "prod"]
    refused(configs(data, "import", project, str(doc), "--mode", "overwrite"), "import mode 'overwrite'")


def test_import_refusals_name_the_problem_and_change_nothing(
    project: str, data: Path, tmp_path: Path
) -> None:
    ok(configs(data, "create", project, "prod", "threshold=1"))
    base = json.loads(ok(configs(data, "export", project)).stdout)
    before = listing(data, project)

    def attempt(doc: Any) -> subprocess.CompletedProcess[str]:
        return configs(data, "import", project, "-", "--force", stdin=json.dumps(doc))

    refused(attempt(base | {"formatVersion": 2}), "export format version 2 is not supported")
    refused(attempt(base | {"format": "something-else"}), "not a configuration export")
    other_id = "11111111-1111-4111-8111-111111111111"
    refused(attempt(base | {"projectId": other_id}), f"the export is of project '{other_id}'")
    bad_values = json.loads(json.dumps(base))
    prod = next(c for c in bad_values["configurations"] if c["name"] == "prod")
    prod["values"] = {"threshold": "high", "region": "mars", "nope": 1}
    refused(
        attempt(bad_values), "prod.threshold: expected a number", "prod.region:", "prod.nope: unknown field"
    )
    refused(configs(data, "import", project, "-", stdin="{not json"), "stdin: not JSON")
    refused(configs(data, "import", project, str(tmp_path / "missing.json")), "missing.json: cannot read it")
    assert listing(data, project) == before


# ----------------------------------------------------------------- server scope


def server_project(tmp_path: Path, data: Path) -> str:
    """The hello example with configuration fields, registered in `data`; alice and bob exist."""
    folder = tmp_path / "hello"
    shutil.copytree(EXAMPLES / "hello", folder)
    package = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    package["configuration"] = {"fields": FIELDS}
    (folder / "package.json").write_text(json.dumps(package), encoding="utf-8")
    for args in (["projects", "add", str(folder)], ["users", "create", "alice"], ["users", "create", "bob"]):
        ok(run_cli([*args, "--data-dir", str(data)], env=clean_env()))
    return HELLO


def audit_events(data: Path) -> list[tuple[str, str | None, str | None, dict[str, Any]]]:
    from webui.store.db import make_engine, sqlite_url
    from webui.store.models import AuditEvent

    engine = make_engine(sqlite_url(data / "steamharness.sqlite3"))
    try:
        with Session(engine) as s:
            rows = s.exec(
                select(AuditEvent)
                .where(col(AuditEvent.event).startswith("config."))
                .order_by(col(AuditEvent.id))
            ).all()
            return [(r.event, r.actor, r.source, dict(r.details or {})) for r in rows]
    finally:
        engine.dispose()


def test_server_scopes_keep_accounts_apart_and_are_audited(tmp_path: Path, data: Path) -> None:
    project = server_project(tmp_path, data)
    ok(
        configs(
            data,
            "create",
            project,
            "alices",
            "threshold=2",
            "--secret",
            "token",
            "--account",
            "alice",
            stdin=SECRET + "\n",
        )
    )
    ok(configs(data, "activate", project, "alices", "--account", "alice"))
    assert sorted(listing(data, project, "--account", "alice")) == ["alices", "default"]
    assert sorted(listing(data, project, "--account", "bob")) == ["default"]
    assert sorted(listing(data, project)) == ["default"]  # the admin principal's scope
    refused(configs(data, "show", project, "alices", "--account", "bob"), "no configuration 'alices'", "bob")
    refused(
        configs(data, "set", project, "alices", "--revision", "1", "threshold=9", "--account", "bob"),
        "no configuration 'alices'",
    )
    ok(configs(data, "create", project, "admins", "threshold=4"))
    assert "admins" not in listing(data, project, "--account", "alice")
    refused(configs(data, "list", project, "--account", "carol"), "no account named 'carol'")
    refused(configs(data, "list", "11111111-1111-4111-8111-111111111111"), "is not registered")
    exported = json.loads(ok(configs(data, "export", project, "--account", "alice")).stdout)
    assert exported["projectId"] == project and exported["active"] == "alices"

    events = audit_events(data)
    assert [(e[0], e[3]["scope"]) for e in events] == [
        ("config.created", "account alice"),
        ("config.activated", "account alice"),
        ("config.created", "admin"),
        ("config.exported", "account alice"),
    ]
    assert all(actor == "cli" and source == "cli" for _, actor, source, _ in events)
    assert SECRET not in json.dumps([e[3] for e in events])
