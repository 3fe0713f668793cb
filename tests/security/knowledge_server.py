"""What the live knowledge-base attack tests share: a large collection written straight into a
running server's store (as an operator's command would, fast: one text chunked and stemmed
once, stored as many documents), and an MCP tool call by another account."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import httpx2
from sqlmodel import Session

from tests.e2e.server import HELLO, LiveServer
from tests.e2e.test_http_mcp import headers, open_session, sse_json
from webui.audit.log import AuditLog
from webui.knowledge import text as kt
from webui.knowledge.model import Actor
from webui.knowledge.service import KnowledgeService
from webui.store import knowledge as ks
from webui.store.db import make_engine
from webui.store.models import KnowledgeDocument

OPERATOR = Actor("cli", "cli")
DOCUMENT_WORDS = 37_500  # about 256 KiB of text a document (~260 chunks)


def document_text(seed: int = 1) -> str:
    rnd = random.Random(seed)
    vocabulary = [
        "".join(rnd.choice("abcdefghijklmnop") for _ in range(rnd.randint(3, 9))) for _ in range(5000)
    ]
    return " ".join(rnd.choice(vocabulary) for _ in range(DOCUMENT_WORDS))


def large_collection(live: LiveServer, project_id: str, name: str, documents: int) -> str:
    """`documents` documents of the same ~256 KiB text (ids d000, d001, …) in a new
    collection; returns the text."""
    body = document_text()
    pieces = [ks.ChunkRow(a, b, body[a:b], kt.terms(body[a:b], "english")) for a, b in kt.chunk_spans(body)]
    engine = make_engine(live.store_url)
    try:
        KnowledgeService(engine, audit=AuditLog(), audit_engine=engine).create_collection(
            project_id, name, actor=OPERATOR
        )
        with Session(engine) as s:
            coll = ks.collection(s, project_id, name)
            assert coll is not None and coll.id is not None
            for i in range(documents):
                row = KnowledgeDocument(
                    project_id=project_id,
                    collection_id=coll.id,
                    doc_id=f"d{i:03d}",
                    title=f"document {i}",
                    meta={},
                    source="text",
                    digest=hashlib.sha256(body.encode()).hexdigest(),
                    size=len(body.encode()),
                    chunks=len(pieces),
                )
                ks.add_document(s, row, pieces, [])
                ks.count(s, coll.id, 1, len(pieces), row.size)
                s.commit()  # a document a transaction: the server's own writes wait for none long
    finally:
        engine.dispose()
    return body


def greet(live: LiveServer, key: str, sid: str, who: str, *, timeout: float) -> dict[str, Any]:
    """One `greet` tool call of the hello project within `timeout` seconds (a hang guard):
    its JSON-RPC reply."""
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": who}},
    }
    r = httpx2.post(live.mcp_url(HELLO), headers=headers(key, sid), json=body, timeout=timeout)
    assert r.status_code == 200, r.text
    return sse_json(r)


__all__ = ["greet", "large_collection", "open_session"]
