"""`steamharness knowledge …`: a project folder's knowledge base (the one `steamharness mcp`
serves it with) and a registered project's (the server's), in the data dir's store or in
`values.sqlite3` of `--persistent-value-store-dir`. The commands run in this process
(`tests/cli_runner.py`: the same entry point, exit codes and streams); stdin and the
terminal's bold marks are also checked through real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from tests import prepared, processes
from tests.cli.test_imports import _PROBE, SERVER_ONLY
from tests.cli_runner import run_cli
from tests.conftest import EXAMPLES
from tests.e2e.server import HELLO, STEAMHARNESS
from tests.helpers import WAIT
from tests.knowledge.files import docx, pdf

PREFIX = "steamharness: error: "
PROJECT = "7a1e5c0b-2d4f-4e8a-9b6c-1f2e3d4c5b6a"
OTHER = "0b9d8c7e-6f5a-4b3c-8d2e-1a0f9e8d7c6b"


def clean_env() -> dict[str, str]:
    """This environment without its STEAMHARNESS_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}


def kb(data: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`steamharness knowledge ARGS --data-dir DATA`, in this process."""
    return run_cli(["knowledge", *args, "--data-dir", str(data)], stdin=stdin, env=clean_env())


def kb_process(data: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """The same command as a real process."""
    return processes.run(
        [STEAMHARNESS, "knowledge", *args, "--data-dir", str(data)],
        text=True,
        timeout=WAIT,
        env=clean_env(),
        **kwargs,
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def refused(done: subprocess.CompletedProcess[str], *needles: str, stdout: str = "") -> str:
    """A refusal: exit 2, one line on stderr naming what is wrong."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(PREFIX), done.stderr
    for needle in needles:
        assert needle in done.stderr, (needle, done.stderr)
    return done.stderr


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(done).stdout)


def write_project(folder: Path, project_id: str = PROJECT) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"id": project_id, "name": "knowing", "projectType": "conversation"}
    (folder / "package.json").write_text(json.dumps(doc), encoding="utf-8")
    return str(folder)


def write_docs(folder: Path) -> Path:
    """One file of each kind, and what a folder's listing leaves out."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alpha.md").write_text(
        "# Alpha\n\nThe lighthouse keeper polishes brass lamps.\n", encoding="utf-8"
    )
    (folder / "beta.txt").write_text("Gardeners prune apple trees in winter.\n", encoding="utf-8")
    (folder / "gamma.html").write_text(
        "<html><head><title>Gamma page</title><script>lighthouse()</script></head>"
        "<body><p>Sailors trust the lighthouse beam at night.</p></body></html>",
        encoding="utf-8",
    )
    (folder / "delta.pdf").write_bytes(pdf("Volcanoes erupt molten basalt."))
    (folder / "epsilon.docx").write_bytes(docx("Beekeepers harvest honey in summer."))
    (folder / ".hidden.md").write_text("lighthouse secret\n", encoding="utf-8")
    (folder / "notes.xyz").write_text("lighthouse unknown kind\n", encoding="utf-8")
    (folder / "nested").mkdir()
    (folder / "nested" / "deep.md").write_text("lighthouse nested\n", encoding="utf-8")
    return folder


def added(done: subprocess.CompletedProcess[str]) -> list[tuple[str, str, str]]:
    """(status, id, file) of each line `add` printed."""
    rows = []
    for line in done.stdout.splitlines():
        status, doc_id, file = line.split(maxsplit=2)
        rows.append((status, doc_id, file))
    return rows


def knowledge_rows(url_path: Path) -> int:
    from webui.store.db import make_engine, sqlite_url
    from webui.store.models import KnowledgeDocument

    engine = make_engine(sqlite_url(url_path))
    try:
        with Session(engine) as s:
            return len(s.exec(select(KnowledgeDocument)).all())
    finally:
        engine.dispose()


def audit_events(data: Path) -> list[tuple[str, str | None, str | None, str | None, dict[str, Any]]]:
    from webui.store.db import make_engine, sqlite_url
    from webui.store.models import AuditEvent

    engine = make_engine(sqlite_url(data / "steamharness.sqlite3"))
    try:
        with Session(engine) as s:
            rows = s.exec(
                select(AuditEvent)
                .where(col(AuditEvent.event).startswith("knowledge."))
                .order_by(col(AuditEvent.id))
            ).all()
            return [(r.event, r.actor, r.source, r.project_id, dict(r.details or {})) for r in rows]
    finally:
        engine.dispose()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data dir holding the store at the newest revision (a copy of the session's: a fresh
    store runs every migration, seconds of disk waits on a busy machine)."""
    return prepared.copy_prepared("store", tmp_path / "data")


@pytest.fixture
def project(tmp_path: Path) -> str:
    return write_project(tmp_path / "project")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return write_docs(tmp_path / "docs")


# ----------------------------------------------------------------- a project folder


def test_a_folder_of_mixed_files_is_added_once_then_found_listed_and_shown(
    project: str, data: Path, docs: Path
) -> None:
    first = added(ok(kb(data, "add", project, "manuals", str(docs))))
    names = ["alpha.md", "beta.txt", "delta.pdf", "epsilon.docx", "gamma.html"]
    assert [(s, f) for s, _, f in first] == [("added", str(docs / n)) for n in names]
    again = added(ok(kb(data, "add", project, "manuals", str(docs))))
    assert again == [("unchanged", i, f) for _, i, f in first]
    ids = {Path(f).name: i for _, i, f in first}

    [coll] = as_json(kb(data, "collections", project, "--json"))
    assert (coll["name"], coll["documents"], coll["chunks"], coll["language"]) == ("manuals", 5, 5, "english")
    table = ok(kb(data, "collections", project)).stdout.splitlines()
    assert table[0].split() == ["COLLECTION", "DOCUMENTS", "CHUNKS", "BYTES", "LANGUAGE"]
    assert table[1].split()[:3] == ["manuals", "5", "5"] and table[1].split()[-1] == "english"

    text = ok(kb(data, "search", project, "lighthouse")).stdout.splitlines()
    assert len(text) == 4  # two hits: the markup and the hidden, unknown, nested files are not indexed
    hits = [text[0].split(maxsplit=3), text[2].split(maxsplit=3)]
    assert [h[0] for h in hits] == ["1.", "2."]
    assert {h[2] for h in hits} == {ids["alpha.md"], ids["gamma.html"]}
    assert {h[3] for h in hits} == {"Alpha", "Gamma page"}  # the Markdown heading; the HTML <title>
    assert all(float(h[1]) > 0 for h in hits)
    assert "[[lighthouse]]" in text[1] and "[[lighthouse]]" in text[3]
    assert "\x1b[" not in "".join(text)  # not a terminal: brackets, never ANSI
    found = as_json(kb(data, "search", project, "honey harvest", "--json"))
    assert [h["documentId"] for h in found["hits"]] == [ids["epsilon.docx"]]
    assert found["mode"] == "text" and found["hits"][0]["highlights"]
    assert "[[Volcanoes]]" in ok(kb(data, "search", project, "volcano", "--collection", "manuals")).stdout
    nothing = ok(kb(data, "search", project, "submarine"))
    assert (nothing.stdout, nothing.stderr) == ("", "no matches\n")

    listed = ok(kb(data, "list", project)).stdout.splitlines()
    assert [line.split()[0] for line in listed] == sorted(ids.values())
    page = as_json(kb(data, "list", project, "--limit", "2", "--json"))
    assert [d["id"] for d in page["documents"]] == sorted(ids.values())[:2]
    rest = as_json(kb(data, "list", project, "--after", page["next"], "--limit", "5", "--json"))
    assert [d["id"] for d in rest["documents"]] == sorted(ids.values())[2:] and rest["next"] is None
    assert f"more: --after {page['next']}" in ok(kb(data, "list", project, "--limit", "2")).stderr

    shown = ok(kb(data, "show", project, ids["delta.pdf"])).stdout
    assert f"id: {ids['delta.pdf']}\n" in shown and "source: delta.pdf\n" in shown
    assert shown.endswith("\n\nVolcanoes erupt molten basalt.\n")
    doc = as_json(kb(data, "show", project, ids["gamma.html"], "--json"))
    assert (doc["title"], doc["collection"], doc["text"]) == (
        "Gamma page",
        "manuals",
        "Sailors trust the lighthouse beam at night.",
    )
    assert doc["metadata"] == {}


def test_ids_titles_metadata_and_filters(project: str, data: Path, docs: Path) -> None:
    ok(kb(data, "create", project, "notes", "--language", "none"))
    note = str(docs / "beta.txt")
    one = [
        "add",
        project,
        "notes",
        note,
        "--id",
        "garden",
        "--metadata",
        '{"team": "green", "tags": ["a", "b"]}',
    ]
    assert added(ok(kb(data, *one))) == [("added", "garden", note)]
    assert added(ok(kb(data, *one))) == [("unchanged", "garden", note)]
    retitled = [*one, "--title", "Pruning"]
    assert added(ok(kb(data, *retitled))) == [("updated", "garden", note)]
    (docs / "beta.txt").write_text("Gardeners graft pear trees in spring.\n", encoding="utf-8")
    assert added(ok(kb(data, *retitled))) == [("replaced", "garden", note)]
    assert as_json(kb(data, "show", project, "garden", "--json"))["title"] == "Pruning"
    ok(
        kb(
            data,
            "add",
            project,
            "notes",
            str(docs / "alpha.md"),
            "--metadata",
            '{"team": "blue", "tags": ["b"]}',
        )
    )

    def listed(raw: str) -> list[str]:
        return [d["id"] for d in as_json(kb(data, "list", project, "--filter", raw, "--json"))["documents"]]

    assert listed('{"team": "green"}') == ["garden"]
    assert len(listed('{"tags": "b"}')) == 2
    assert len(listed('{"team": ["green", "blue"]}')) == 2
    assert listed('{"team": "red"}') == []
    hits = as_json(kb(data, "search", project, "pear", "--filter", '{"team": "green"}', "--json"))["hits"]
    assert [h["documentId"] for h in hits] == ["garden"]
    assert (
        as_json(kb(data, "search", project, "pear", "--filter", '{"team": "blue"}', "--json"))["hits"] == []
    )
    colls = {c["name"]: c["language"] for c in as_json(kb(data, "collections", project, "--json"))}
    assert colls == {"notes": "none"}
    exists = ok(kb(data, "create", project, "notes")).stdout
    assert "collection notes exists already" in exists and "2 document(s)" in exists


def test_a_refused_file_stops_the_add_unless_keep_going(project: str, data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.md").write_text("Anchors hold ships.\n", encoding="utf-8")
    (folder / "b.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf at all")
    (folder / "c.txt").write_text("Compasses point north.\n", encoding="utf-8")
    stopped = kb(data, "add", project, "ships", str(folder))
    assert stopped.returncode == 2
    assert [(s, f) for s, _, f in added(stopped)] == [("added", str(folder / "a.md"))]
    assert stopped.stderr == f"{PREFIX}{folder / 'b.pdf'}: not a readable PDF\n"
    assert [d["source"] for d in as_json(kb(data, "list", project, "--json"))["documents"]] == ["a.md"]

    going = kb(data, "add", project, "ships", str(folder), str(tmp_path / "mixed" / "c.txt"), "--keep-going")
    assert going.returncode == 2
    assert [s for s, _, _ in added(going)] == ["unchanged", "added", "unchanged"]
    assert going.stderr == f"{PREFIX}{folder / 'b.pdf'}: not a readable PDF\n"
    (folder / "d.xyz").write_text("x\n", encoding="utf-8")
    refused(kb(data, "add", project, "ships", str(folder / "d.xyz")), "d.xyz: cannot add a file of this kind")
    assert len(as_json(kb(data, "list", project, "--json"))["documents"]) == 2


def test_export_then_import_into_another_project_round_trips(
    project: str, data: Path, docs: Path, tmp_path: Path
) -> None:
    ok(kb(data, "add", project, "manuals", str(docs)))
    ok(
        kb(
            data,
            "add",
            project,
            "notes",
            "-",
            "--id",
            "n1",
            "--metadata",
            '{"k": 1}',
            stdin="Kites\u2028fly high.\n",
        )
    )
    out = tmp_path / "kb.ndjson"
    wrote = ok(kb(data, "export", project, "-o", str(out)))
    assert wrote.stdout == "" and "exported 2 collection(s), 6 document(s)" in wrote.stderr
    streamed = ok(kb(data, "export", project)).stdout
    assert streamed == out.read_text(encoding="utf-8")
    lines = [json.loads(line) for line in streamed.split("\n") if line]
    assert [x["type"] for x in lines].count("collection") == 2 and len(lines) == 8
    only = ok(kb(data, "export", project, "--collection", "notes")).stdout
    assert [json.loads(x)["type"] for x in only.splitlines()] == ["collection", "document"]

    other = write_project(tmp_path / "other", OTHER)
    done = ok(kb(data, "import", other, str(out))).stdout
    assert "2 collection(s) created" in done and "6 added" in done
    again = ok(kb(data, "import", other, "-", stdin=streamed)).stdout
    assert "0 collection(s) created" in again and "6 unchanged" in again
    copied = [json.loads(line) for line in ok(kb(data, "export", other)).stdout.splitlines()]
    # the same collections and documents (ids, titles, metadata, text); an imported document's
    # source is "text" (the service adds it from its text)
    assert [{**x, "source": None} for x in copied] == [{**x, "source": None} for x in lines]
    assert as_json(kb(data, "show", other, "n1", "--json"))["text"] == "Kites\u2028fly high.\n"

    events = [(e, actor, source, pid) for e, actor, source, pid, _ in audit_events(data)]
    assert ("knowledge.exported", "cli", "cli", PROJECT) in events
    assert ("knowledge.imported", "cli", "cli", OTHER) in events
    assert all(actor == "cli" and source == "cli" for _, actor, source, _ in events)


def test_import_refusals_name_the_line(project: str, data: Path) -> None:
    good = json.dumps({"type": "collection", "name": "c1"})
    refused(kb(data, "import", project, "-", stdin=f"{good}\n{{oops\n"), "stdin: line 2: not JSON")
    refused(kb(data, "import", project, "-", stdin=f"{good}\n\n{good}\n"), "stdin: line 2: empty")
    assert as_json(kb(data, "collections", project, "--json")) == []  # nothing written
    bad_doc = json.dumps({"type": "document", "collection": "c1", "id": "x"})
    refused(kb(data, "import", project, "-", stdin=f"{good}\n{bad_doc}\n"), "stdin: line 2:", '"text"')
    refused(kb(data, "import", project, "/nonexistent/kb.ndjson"), "kb.ndjson: cannot read it")


def test_remove_a_document_and_a_collection(project: str, data: Path, docs: Path) -> None:
    rows = added(ok(kb(data, "add", project, "manuals", str(docs))))
    ok(kb(data, "add", project, "notes", "-", "--id", "n1", stdin="Otters hold hands.\n"))
    first = rows[0][1]
    assert ok(kb(data, "remove", project, first)).stdout == f"removed {first}\n"
    refused(kb(data, "remove", project, first), f"no document {first!r}")
    refused(kb(data, "show", project, first), f"no document {first!r}")
    refused(kb(data, "remove", project, "--collection", "manuals"), "--yes is required", "4 document(s)")
    refused(kb(data, "remove", project, first, "--collection", "manuals"), "one of them")
    refused(kb(data, "remove", project), "give a DOC_ID or --collection")
    gone = ok(kb(data, "remove", project, "--collection", "manuals", "--yes")).stdout
    assert gone == "removed collection manuals (4 document(s))\n"
    assert [c["name"] for c in as_json(kb(data, "collections", project, "--json"))] == ["notes"]
    refused(kb(data, "remove", project, "--collection", "manuals", "--yes"), "collection 'manuals' not found")
    events = [e for e, *_ in audit_events(data)]
    assert (
        events.count("knowledge.document.removed") == 1 and events.count("knowledge.collection.removed") == 1
    )


def test_removing_a_collection_again_finishes_a_removal_cut_short(
    project: str, data: Path, docs: Path
) -> None:
    from webui.audit.log import AuditLog
    from webui.knowledge.model import Actor
    from webui.knowledge.service import KnowledgeService
    from webui.store.db import make_engine, sqlite_url

    ok(kb(data, "add", project, "manuals", str(docs)))
    engine = make_engine(sqlite_url(data / "steamharness.sqlite3"))
    try:  # a removal marked, then stopped (a crash) before its batches ran
        KnowledgeService(engine, audit=AuditLog(), audit_engine=engine).removals.begin_removal(
            PROJECT, "manuals", actor=Actor("cli", "cli")
        )
    finally:
        engine.dispose()
    assert as_json(kb(data, "collections", project, "--json")) == []  # hidden already
    gone = ok(kb(data, "remove", project, "--collection", "manuals", "--yes")).stdout
    assert gone == "removed collection manuals (5 document(s))\n"
    refused(kb(data, "remove", project, "--collection", "manuals", "--yes"), "collection 'manuals' not found")
    assert as_json(kb(data, "list", project, "--json"))["documents"] == []


def test_the_persistent_value_store_dir_holds_the_knowledge_base(
    project: str, data: Path, docs: Path, tmp_path: Path
) -> None:
    values = tmp_path / "values"
    opt = ["--persistent-value-store-dir", str(values)]
    ok(kb(data, "add", project, "manuals", str(docs), *opt))
    assert knowledge_rows(values / "values.sqlite3") == 5
    assert knowledge_rows(data / "steamharness.sqlite3") == 0
    assert as_json(kb(data, "collections", project, "--json")) == []  # the main store's: empty
    assert len(as_json(kb(data, "list", project, "--json", *opt))["documents"]) == 5
    env = clean_env() | {"STEAMHARNESS_PERSISTENT_VALUE_STORE_DIR": str(values)}
    by_env = run_cli(["knowledge", "search", project, "basalt", "--data-dir", str(data)], env=env)
    assert "[[basalt]]" in ok(by_env).stdout
    events = audit_events(data)  # audited in the main store all the same
    assert [e for e, *_ in events].count("knowledge.document.added") == 5


# ----------------------------------------------------------------- a server project


def server_project(tmp_path: Path, data: Path) -> str:
    folder = tmp_path / "hello"
    shutil.copytree(EXAMPLES / "hello", folder)
    ok(run_cli(["projects", "add", str(folder), "--data-dir", str(data)], env=clean_env()))
    return HELLO


def test_a_registered_project_id_is_the_servers_knowledge_base(
    tmp_path: Path, data: Path, docs: Path
) -> None:
    hello = server_project(tmp_path, data)
    rows = added(ok(kb(data, "add", hello, "manuals", str(docs / "beta.txt"))))
    assert [s for s, _, _ in rows] == ["added"]
    hit = as_json(kb(data, "search", hello.upper(), "apple", "--json"))["hits"][0]
    assert hit["documentId"] == rows[0][1] and hit["collection"] == "manuals"
    refused(kb(data, "list", "11111111-1111-4111-8111-111111111111"), "is not registered")
    events = audit_events(data)
    assert [(e, actor, source, pid) for e, actor, source, pid, _ in events] == [
        ("knowledge.collection.created", "cli", "cli", hello),
        ("knowledge.document.added", "cli", "cli", hello),
    ]
    result = as_json(kb(data, "add", hello, "manuals", str(docs / "beta.txt"), "--json"))
    assert [(r["status"], r["file"], r["id"]) for r in result] == [
        ("unchanged", str(docs / "beta.txt"), rows[0][1])
    ]


# ----------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["add", "{p}", "c", "{d}", "--metadata", "{{nope"], ["--metadata: not JSON"]),
        (["add", "{p}", "c", "{d}", "--metadata", "[1]"], ["--metadata: must be a JSON object"]),
        (["add", "{p}", "c", "{d}", "--metadata", '{{"a": 1, "a": 2}}'], ["--metadata:", "duplicate key"]),
        (["list", "{p}", "--filter", "{{nope"], ["--filter: not JSON"]),
        (["search", "{p}", "word", "--filter", '"x"'], ["--filter: a filter is a JSON object"]),
        (["add", "{p}", "c", "{t}/missing.md"], ["missing.md: no such file or folder"]),
        (["add", "{p}", "c", "{t}/empty"], ["empty: the folder holds no file of a known kind", ".docx"]),
        (["add", "{p}", "c", "{d}", "--id", "one"], ["--id applies to one file; 5 given"]),
        (["add", "{p}", "bad name!", "{d}"], ["invalid collection name 'bad name!'"]),
        (["add", "{p}", "c", "-", "-"], ["'-' (text from stdin) may be given once"]),
        (["add", "{p}", "c", "-"], ["stdin: has no text to index"]),
        (["list", "{p}", "--collection", "nope"], ["collection 'nope' not found"]),
        (["search", "{p}", "word", "--collection", "nope"], ["collection 'nope' not found"]),
        (["export", "{p}", "--collection", "nope"], ["collection 'nope' not found"]),
        (["search", "{p}", "***"], ["query"]),
        (["list", "{t}/nowhere"], ["neither an existing project folder nor a project id"]),
        (["list", "{t}"], ["no package.json"]),
        (["list", "{p}", "--limit", "0"], ["limit must be an integer from 1 to 200"]),
    ],
    ids=lambda v: (
        " ".join(v) if isinstance(v, list) and v and v[0] in ("add", "list", "search", "export") else ""
    ),
)
def test_bad_input_is_one_line_and_exit_2(
    project: str, data: Path, docs: Path, tmp_path: Path, args: list[str], needles: list[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.xyz").write_text("x\n", encoding="utf-8")
    filled = [a.format(p=project, d=docs, t=tmp_path) for a in args]
    refused(kb(data, *filled, stdin=" \n"), *needles)
    assert as_json(kb(data, "collections", project, "--json")) == []  # nothing written


# ----------------------------------------------------------------- real processes


def test_stdin_and_marks_through_real_processes(project: str, data: Path) -> None:
    """Text down a real pipe into `add -`; `search` marks with brackets into a pipe and with
    ANSI bold into a terminal."""
    done = kb_process(
        data, "add", project, "notes", "-", input="Quokkas smile at tourists.\n", capture_output=True
    )
    assert done.returncode == 0, done.stderr
    [(status, _, file)] = added(done)
    assert (status, file) == ("added", "-")
    piped = kb_process(data, "search", project, "quokka", capture_output=True)
    assert piped.returncode == 0 and "[[Quokkas]]" in piped.stdout and "\x1b[" not in piped.stdout

    main, other = os.openpty()
    try:
        shown = kb_process(data, "search", project, "quokka", stdout=other, stderr=subprocess.PIPE)
        os.close(other)
        other = -1
        chunks = []
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal's other side closed (Linux: EIO)
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
        if other != -1:
            os.close(other)
    assert shown.returncode == 0, shown.stderr
    text = b"".join(chunks).decode()
    assert "\x1b[1mQuokkas\x1b[0m" in text and "[[" not in text


def test_knowledge_help_imports_no_server_only_package() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(["knowledge", "add", "--help"]), json.dumps(SERVER_ONLY)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Usage:" in done.stdout, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("IMPORTED "))
    assert json.loads(line.removeprefix("IMPORTED ")) == []
