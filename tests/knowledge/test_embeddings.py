"""Vector and hybrid search through a real OpenAI-compatible embeddings endpoint on loopback
(a small HTTP server in the test that embeds words by meaning groups): a synonym is found by
vector search where full-text finds nothing; an endpoint that fails writes nothing."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from sqlalchemy.engine import Engine

from tests.knowledge.conftest import ADMIN
from webui.audit.log import AuditLog
from webui.errors import KnowledgeRefused
from webui.knowledge.embeddings import Embedder, EmbeddingsFailed
from webui.knowledge.service import KnowledgeService

GROUPS = [{"car", "automobile", "vehicle"}, {"owl", "bird"}, {"cake", "dessert"}, {"sea", "ocean"}]


def embed(text: str) -> list[float]:
    vec = [0.0] * (len(GROUPS) + 1)
    for word in re.findall(r"\w+", text.lower()):
        for i, group in enumerate(GROUPS):
            if word in group:
                vec[i] += 1.0
    vec[-1] = 0.01
    return vec


class Endpoint(BaseHTTPRequestHandler):
    fail = False
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append({"auth": self.headers.get("authorization"), "model": body["model"]})
        if type(self).fail:
            self.send_response(500)
            self.end_headers()
            return
        data = [{"index": i, "embedding": embed(t)} for i, t in enumerate(body["input"])]
        raw = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    Endpoint.fail = False
    Endpoint.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/embeddings"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def vkb(engine: Engine, endpoint: str) -> KnowledgeService:
    embedder = Embedder(endpoint, key="test-embedding-key", model="tiny")
    return KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, embedder=embedder)


def ids(found: dict[str, Any]) -> list[str]:
    return [h["documentId"] for h in found["hits"]]


def test_vector_search_finds_meaning_that_full_text_misses(vkb: KnowledgeService) -> None:
    vkb.add("p", "docs", actor=ADMIN, doc_id="car", text="My car is red.")
    vkb.add("p", "docs", actor=ADMIN, doc_id="owl", text="An owl at night.")
    vkb.add("p", "docs", actor=ADMIN, doc_id="cake", text="Chocolate cake recipe.")
    assert ids(vkb.search("p", "automobile", mode="text")) == []
    assert ids(vkb.search("p", "automobile", mode="vector", limit=1)) == ["car"]
    vkb.add("p", "docs", actor=ADMIN, doc_id="vehicle", text="A vehicle parked outside.")
    assert ids(vkb.search("p", "car", mode="text")) == ["car"]
    hybrid = vkb.search("p", "car")
    assert hybrid["mode"] == "hybrid"
    assert ids(hybrid)[:2] == ["car", "vehicle"]  # car: both rankings; vehicle: by meaning only
    assert Endpoint.seen[0] == {"auth": "Bearer test-embedding-key", "model": "tiny"}


def test_filters_hold_for_vector_search(vkb: KnowledgeService) -> None:
    vkb.add("p", "docs", actor=ADMIN, doc_id="a", text="sea view", metadata={"k": 1})
    vkb.add("p", "docs", actor=ADMIN, doc_id="b", text="ocean view", metadata={"k": 2})
    vkb.add("q", "docs", actor=ADMIN, doc_id="c", text="ocean elsewhere")
    assert ids(vkb.search("p", "ocean", mode="vector", filter={"k": 1})) == ["a"]
    assert "c" not in ids(vkb.search("p", "ocean", mode="vector"))


def test_a_failing_endpoint_writes_nothing_and_says_so(vkb: KnowledgeService) -> None:
    Endpoint.fail = True
    with pytest.raises(EmbeddingsFailed, match="answered HTTP 500"):
        vkb.add("p", "docs", actor=ADMIN, text="car")
    assert vkb.collections("p") == []


def test_an_unreachable_endpoint_is_one_clear_error(engine: Engine) -> None:
    kb = KnowledgeService(
        engine, audit=AuditLog(), audit_engine=engine, embedder=Embedder("http://127.0.0.1:9/v1/embeddings")
    )
    with pytest.raises(EmbeddingsFailed, match="could not be reached"):
        kb.add("p", "docs", actor=ADMIN, text="car")


def test_without_an_endpoint_text_search_alone_and_vector_modes_refused(kb: KnowledgeService) -> None:
    kb.add("p", "docs", actor=ADMIN, text="car")
    assert kb.search("p", "car")["mode"] == "text"
    with pytest.raises(KnowledgeRefused, match="needs an embedding endpoint"):
        kb.search("p", "car", mode="vector")
