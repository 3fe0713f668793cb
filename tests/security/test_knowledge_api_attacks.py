"""Hostile input to the knowledge base's JSON API, on the real app and store: bodies past the
caps, files past a file's cap, JSON nested deep (in bodies, metadata, filters and import
lines), full-text and SQL syntax in queries, ids and names, malformed multipart bodies and
NDJSON. Each is refused with a 4xx naming what is wrong (never a 500), and refused writes
leave nothing behind."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from pydantic import SecretStr

from tests import prepared
from tests.web.conftest import HELLO, LEDGER, Web, running
from webui.settings import Settings

ADMIN_KEY = secrets.token_urlsafe(32)
KEY = {"Authorization": f"Bearer {ADMIN_KEY}"}
BASE = f"/api/workflows/{HELLO}/knowledge"
FILE_CAP = 4000  # STEAMHARNESS_MAX_FILE_BYTES of the app under attack
BODY_CAP = 1024 * 1024  # the default STEAMHARNESS_MAX_BODY_BYTES
SYNTAX = [
    '"',
    '"unterminated phrase',
    "'; DROP TABLE knowledge_documents; --",
    "tea' OR '1'='1",
    "NEAR(tea coffee, 2)",
    "tea AND NOT coffee OR *",
    "title:tea",
    "^tea",
    "tea*",
    "(((tea",
    "{tea}",
    "tea & coffee | !milk <-> sugar:*",
    "-tea +coffee",
    "\\",
    "\x00tea",
    "% _ [a-z]",
    "🍵 茶 お茶",
    "tea " * 500,
]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Web]:
    data = prepared.copy_prepared("web", tmp_path / "data")
    settings = Settings(data_dir=data, server_admin_key=SecretStr(ADMIN_KEY), max_file_bytes=FILE_CAP)
    with running(settings) as web:
        yield web


def error(r: httpx2.Response) -> dict[str, Any]:
    assert r.headers["content-type"].startswith("application/json"), r.text
    return r.json()["error"]


def refused(r: httpx2.Response, status: int, says: str) -> None:
    assert r.status_code == status, r.text
    assert says in error(r)["message"], r.text


def documents(web: Web) -> list[dict[str, Any]]:
    return web.client.get(f"{BASE}/documents", headers=KEY).json()["documents"]


def upload(web: Web, name: str, data: bytes, **fields: str) -> httpx2.Response:
    return web.client.post(
        f"{BASE}/documents", data={"collection": "files", **fields}, files={"file": (name, data)}, headers=KEY
    )


def test_a_document_body_past_the_upload_cap_is_413_and_writes_nothing(kb: Web) -> None:
    """A document's body (JSON, multipart or an import) may be as large as a file plus its
    form (the guard's LARGE_BODY_PATH), not more; every other JSON body keeps the body cap."""
    upload_cap = FILE_CAP + BODY_CAP
    text = "x" * upload_cap
    r = kb.client.post(f"{BASE}/documents", json={"collection": "c", "text": text}, headers=KEY)
    assert r.status_code == 413 and error(r)["code"] == "too_large", r.text
    ndjson = (json.dumps({"type": "document", "collection": "c", "text": text}) + "\n").encode()
    refused(kb.client.post(f"{BASE}/import", content=ndjson, headers=KEY), 413, f"larger than {upload_cap}")
    query = {"query": "x" * BODY_CAP}
    refused(kb.client.post(f"{BASE}/search", json=query, headers=KEY), 413, f"larger than {BODY_CAP}")
    assert documents(kb) == []
    fits = "y " * (BODY_CAP // 2 + 1000)  # past the body cap, within the upload cap
    assert (
        kb.client.post(f"{BASE}/documents", json={"collection": "c", "text": fits}, headers=KEY).status_code
        == 201
    )


def test_a_file_past_the_file_cap_is_413_naming_it_and_a_declared_huge_upload_is_refused_unread(
    kb: Web,
) -> None:
    r = upload(kb, "big.txt", b"a" * (FILE_CAP + 1))
    assert r.status_code == 413 and error(r)["code"] == "file_too_large", r.text
    assert error(r)["message"] == f"big.txt: larger than the {FILE_CAP} bytes a file may be"
    huge = upload(kb, "huge.txt", b"a" * (FILE_CAP + 70 * 1024))
    refused(huge, 413, f"the upload is larger than the {FILE_CAP} bytes a file may be")
    assert upload(kb, "fits.txt", b"a " * (FILE_CAP // 2)).status_code == 201
    assert [d["source"] for d in documents(kb)] == ["fits.txt"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
        (
            b'{"collection": "c", "text": "t", "metadata": ' + b"[" * 70 + b"]" * 70 + b"}",
            "nested deeper than 64",
        ),
        (
            b'{"collection": "c", "text": "t", "metadata": {"a": {"b": {"c": {"d": 1}}}}}',
            "deeper than 4 levels",
        ),
        (b'{"collection": "c", "text": "t", "metadata": [1]}', "metadata must be a JSON object"),
        (b'{"collection": "c", "collection": "d", "text": "t"}', "duplicate key 'collection'"),
        (b'{"collection": "c", "text": "t", "metadata": {"n": NaN}}', "NaN is not valid JSON"),
        (b'{"collection": "\xff", "text": "t"}', "not UTF-8"),
        (b'["collection", "text"]', "must be a JSON object"),
        (b'{"collection": "c", "text": 7}', "text: expected the document's text as a string"),
        (b'{"collection": "c", "text": "   "}', "has no text to index"),
        (b'{"collection": "c", "text": "t", "id": "../../etc/passwd"}', "invalid document id"),
        (b'{"collection": "c d", "text": "t"}', "invalid collection name"),
        (b'{"collection": "c", "text": "t", "title": "' + b"t" * 301 + b'"}', "longer than 300 characters"),
        (b"", "the request body is empty"),
    ],
    ids=lambda v: v.decode("utf-8", "replace")[:30] if isinstance(v, bytes) else None,
)
def test_a_hostile_document_body_is_a_400_naming_the_problem(kb: Web, body: bytes, says: str) -> None:
    r = kb.client.post(f"{BASE}/documents", content=body, headers={**KEY, "Content-Type": "application/json"})
    refused(r, 400, says)
    assert documents(kb) == []


def test_deep_or_malformed_filters_are_refused_in_the_query_string_and_in_a_search(kb: Web) -> None:
    assert kb.client.post(
        f"{BASE}/documents", json={"collection": "c", "text": "tea"}, headers=KEY
    ).is_success
    for raw, says in (
        ("[" * 2000 + "]" * 2000, "nested deeper than 64 levels"),
        ('{"a": {"b": 1}}', "values must be strings, numbers, booleans or null"),
        ('{"a": [[1]]}', "values must be strings, numbers, booleans or null"),
        ("[1]", "a filter is a JSON object"),
        ("{oops", "filter is not valid JSON"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("", "filter is empty"),
        (json.dumps({f"k{n}": 1 for n in range(9)}), "at most 8 keys"),
        (json.dumps({"a": list(range(33))}), "give 1-32 values"),
    ):
        r = kb.client.get(f"{BASE}/documents", params={"filter": raw}, headers=KEY)
        refused(r, 400, says)
    too_long = kb.client.get(f"{BASE}/documents", params={"filter": "{" + " " * 5000 + "}"}, headers=KEY)
    assert too_long.status_code == 422 and error(too_long)["code"] == "invalid_request"
    for bad in ({"a": {"b": 1}}, [1], "tea", {"": 1}):
        r = kb.client.post(f"{BASE}/search", json={"query": "tea", "filter": bad}, headers=KEY)
        assert r.status_code == 400 and error(r)["code"] == "invalid_knowledge", (bad, r.text)
    deep = b'{"query": "tea", "filter": ' + b"[" * 100 + b"]" * 100 + b"}"
    refused(kb.client.post(f"{BASE}/search", content=deep, headers=KEY), 400, "nested deeper than 64")


def test_full_text_and_sql_syntax_anywhere_is_never_a_server_error(kb: Web) -> None:
    for n, text in enumerate(SYNTAX):
        kb.client.post(
            f"{BASE}/documents",
            json={
                "collection": "c",
                "id": f"d{n}",
                "text": f"tea and coffee {text}",
                "metadata": {"k": text},
            },
            headers=KEY,
        )
    for text in SYNTAX:
        for mode in ("auto", "text"):
            r = kb.client.post(f"{BASE}/search", json={"query": text, "mode": mode}, headers=KEY)
            assert r.status_code in (200, 400), (text, r.text)
            if r.status_code == 400:
                assert error(r)["code"] == "invalid_knowledge"
        for params in ({"filter": json.dumps({"k": text})}, {"after": text[:128]}, {"collection": text[:64]}):
            r = kb.client.get(f"{BASE}/documents", params=params, headers=KEY)
            assert r.status_code in (200, 400, 404, 422), (params, r.text)
        for path in (f"/documents/{quote(text[:100], safe='')}", f"/collections/{quote(text[:60], safe='')}"):
            r = kb.client.get(f"{BASE}{path}", headers=KEY)
            assert r.status_code in (400, 404, 422), (path, r.text)
    quoted = kb.client.post(
        f"{BASE}/search", json={"query": "'; DROP TABLE knowledge_documents; --"}, headers=KEY
    )
    assert quoted.status_code == 200 and quoted.json()["hits"], quoted.text  # the words still match
    filtered = kb.client.get(
        f"{BASE}/documents", params={"filter": json.dumps({"k": SYNTAX[2]})}, headers=KEY
    )
    assert [d["id"] for d in filtered.json()["documents"]] == ["d2"]
    assert len(documents(kb)) == len(SYNTAX)


def test_path_tricks_in_ids_and_names_are_refused_or_not_found(kb: Web) -> None:
    for path in (
        "/documents/..%2F..%2Fetc%2Fpasswd",
        "/documents/%00",
        "/documents/" + "a" * 129,
        "/collections/..",
        "/collections/" + "a" * 65,
        f"/documents/%2e%2e%2f{LEDGER}",
    ):
        for method in ("GET", "DELETE"):
            r = kb.client.request(method, f"{BASE}{path}", headers=KEY)
            assert 400 <= r.status_code < 500 and r.status_code != 401, (method, path, r.text)


def test_malformed_multipart_bodies_are_refused_with_a_4xx(kb: Web) -> None:
    no_boundary = kb.client.post(
        f"{BASE}/documents", content=b"--x\r\n", headers={**KEY, "Content-Type": "multipart/form-data"}
    )
    assert no_boundary.status_code == 400, no_boundary.text
    garbage = kb.client.post(
        f"{BASE}/documents",
        content=b"not multipart at all",
        headers={**KEY, "Content-Type": "multipart/form-data; boundary=zzz"},
    )
    assert 400 <= garbage.status_code < 500, garbage.text
    two_files = kb.client.post(
        f"{BASE}/documents",
        data={"collection": "files"},
        files=[("file", ("a.txt", b"one")), ("file", ("b.txt", b"two"))],
        headers=KEY,
    )
    assert two_files.status_code == 400, two_files.text
    # A field past its 64 KiB, in a body within what the route reads.
    big_field = kb.client.post(
        f"{BASE}/documents",
        data={"collection": "files", "title": "t" * (65 * 1024 + 100)},
        files={"file": ("a.txt", b"text")},
        headers=KEY,
    )
    assert big_field.status_code == 400, big_field.text
    deep_meta = upload(kb, "a.txt", b"text", metadata="[" * 1000 + "]" * 1000)
    refused(deep_meta, 400, "metadata is not valid JSON: arrays and objects are nested deeper than 64")
    not_utf8 = upload(kb, "a.txt", b"\xff\xfe text")
    refused(not_utf8, 400, "a.txt: not UTF-8 text")
    zip_bomb_name = upload(kb, "a.docx", b"PK\x03\x04 broken")
    assert zip_bomb_name.status_code == 400 and error(zip_bomb_name)["message"].startswith("a.docx:")
    assert documents(kb) == []


def test_an_import_stops_at_the_first_bad_line_naming_it_and_keeps_the_lines_before(kb: Web) -> None:
    good = [
        {"type": "collection", "name": "c", "language": "english"},
        {"type": "document", "collection": "c", "id": "one", "text": "One."},
    ]
    head = b"".join(json.dumps(line).encode() + b"\n" for line in good)
    for tail, says in (
        (b"{oops\n", "line 3 is not valid JSON"),
        (b"[1, 2]\n", 'line 3: expected an object with "type"'),
        (b'{"type": "document", "collection": "c"}\n', 'line 3: a document needs its "text"'),
        (b'{"type": "document", "collection": "c", "text": "t", "metadata": {"a": {"b": {"c": {"d": 1}}}}}',
         "line 3: metadata is nested deeper than 4 levels"),
        (b"[" * 100 + b"]" * 100, "line 3 is not valid JSON: arrays and objects are nested deeper than 64"),
        (b'{"type": "document", "type": "collection"}', "line 3 is not valid JSON: duplicate key 'type'"),
        (b"\xff\n", "line 3 is not UTF-8 text"),
    ):  # fmt: skip
        r = kb.client.post(f"{BASE}/import", content=head + tail, headers=KEY)
        refused(r, 400, says)
    assert [d["id"] for d in documents(kb)] == ["one"]
    blank = kb.client.post(f"{BASE}/import", content=b"\n \n\r\n", headers=KEY)
    refused(blank, 400, "the body is empty; send the NDJSON lines of an export")
    crlf = kb.client.post(f"{BASE}/import", content=head.replace(b"\n", b"\r\n"), headers=KEY)
    assert crlf.status_code == 200 and crlf.json()["unchanged"] == 1, crlf.text
