"""Ranked search of a project's knowledge base: full text (BM25 over the stems of each
collection's language), by vector (cosine over the chunks' embeddings, in batches) or both
fused (reciprocal rank fusion). Blocking, and no network call: the query's embedding is given."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.errors import KnowledgeRefused, NotFound
from webui.knowledge import text as kt
from webui.knowledge.model import MAX_SEARCH_LIMIT, check_limit, check_name, parse_filter
from webui.store import knowledge as ks
from webui.store import knowledge_search as ksearch

VECTOR_SCAN_CAP = 50_000  # chunks a vector search compares at most
# A query matching more chunks than this (a word in most of them) is ranked among the newest
# this many of its matches only, and says so (`approximate`): finding matches is cheap,
# scoring each is not (BM25 over 100k matches costs ~200 ms).
RANKED_CANDIDATES = 4000
RRF_K = 60  # reciprocal rank fusion: score = sum 1 / (RRF_K + rank)


def search_mode(query: Any, mode: Any, *, embeddings: bool) -> str:
    """The mode a search runs in (`auto` chosen), once its query and mode are checked;
    `embeddings`: whether an embedding endpoint is configured."""
    if not isinstance(query, str):
        raise KnowledgeRefused("the query must be a string")
    if len(query) > kt.MAX_QUERY_CHARS:
        raise KnowledgeRefused(f"the query is longer than {kt.MAX_QUERY_CHARS} characters")
    if mode not in ("auto", "text", "vector", "hybrid"):
        raise KnowledgeRefused("mode must be auto, text, vector or hybrid")
    if mode in ("vector", "hybrid") and not embeddings:
        raise KnowledgeRefused(f"{mode} search needs an embedding endpoint (STEAMHARNESS_EMBEDDINGS_URL)")
    return ("hybrid" if embeddings else "text") if mode == "auto" else mode


def search_embedded(
    engine: Engine,
    project_id: str,
    query: str,
    *,
    collection: str | list[str] | None = None,
    filter: Any = None,
    limit: int | None = None,
    mode: str,
    vector: list[float] | None = None,
) -> dict[str, Any]:
    """A search in `mode` (text, vector or hybrid: `search_mode` chose it) with the query's
    embedding given (`vector`, for the vector and hybrid modes): blocking, and no network
    call."""
    used = mode
    if used in ("vector", "hybrid") and vector is None:
        raise ValueError("a vector or hybrid search needs the query's embedding")
    size = check_limit(limit, 10, MAX_SEARCH_LIMIT)
    filters = parse_filter(filter)
    names = [collection] if isinstance(collection, str) else collection
    if names is not None and (not isinstance(names, list) or not names):
        raise KnowledgeRefused("collection must be a name or a non-empty list of names")
    with Session(engine) as s:
        every = {c.name: c for c, *_ in ks.collections(s, project_id)}
        for name in names or ():
            if check_name(name) not in every:
                raise NotFound(f"collection {name!r} not found")
        searched = list(every.values()) if names is None else [every[name] for name in dict.fromkeys(names)]
        # "All of the project's chunks" is a cheaper scope, but holds a collection being removed.
        whole = not ks.removing(s, project_id)
        # The collections of each language searched; None where that is all of them (no filter).
        groups: dict[str, list[int]] = {}
        for c in searched:
            if c.id is not None:
                groups.setdefault(c.language, []).append(c.id)
        by_language: dict[str, list[int] | None] = {
            language: None if whole and len(chosen) == len(every) else chosen
            for language, chosen in groups.items()
        }
        ids = None if whole and len(searched) == len(every) else [c.id for c in searched if c.id is not None]
        try:
            parsed = {
                lang: kt.parse_query(query, lang) for lang in by_language or {kt.DEFAULT_LANGUAGE: None}
            }
        except kt.QueryRefused as exc:
            raise KnowledgeRefused(str(exc)) from None
        text_hits: list[ksearch.Match] = []
        approximate = False
        if searched and used != "vector":  # no collection: nothing to search in
            pool = size if used == "text" else max(size * 3, 30)
            for lang, q in parsed.items():
                chosen = by_language.get(lang)
                floor = ksearch.candidate_floor(
                    s, project_id, q, collection_ids=chosen, filters=filters, cap=RANKED_CANDIDATES
                )
                approximate = approximate or floor is not None
                text_hits += ksearch.search(
                    s, project_id, q, collection_ids=chosen, filters=filters, limit=pool, floor=floor
                )
            text_hits.sort(key=lambda m: (-m.score, m.chunk_id))
        vector_hits: list[ksearch.Match] = []
        if searched and vector is not None and used in ("vector", "hybrid"):
            vector_hits = _vector_search(s, project_id, vector, ids, filters, max(size * 3, 30))
    hits = _fuse(text_hits, vector_hits, size) if used == "hybrid" else (text_hits or vector_hits)[:size]
    return {"mode": used, "approximate": approximate, "hits": [_hit(m, parsed) for m in hits]}


def _hit(m: ksearch.Match, parsed: dict[str, kt.Query]) -> dict[str, Any]:
    q = parsed.get(m.language)
    cut = kt.snippet(m.body, q.stems if q else frozenset(), m.language)
    return {
        "documentId": m.doc_id,
        "collection": m.collection,
        "title": m.title,
        "metadata": m.meta,
        "chunk": {"position": m.position, "start": m.start, "end": m.end},
        "score": m.score,
        "snippet": cut.text,
        "highlights": [list(h) for h in cut.highlights],
    }


def _vector_search(
    s: Session, project_id: str, wanted: list[float], ids: list[int] | None, filters: Any, pool: int
) -> list[ksearch.Match]:
    """The chunks nearest to the query's embedding (`wanted`) by cosine, compared in
    batches (at most VECTOR_SCAN_CAP chunks; memory stays one batch)."""
    import numpy as np

    target = np.asarray(wanted, dtype=np.float32)
    norm = float(np.linalg.norm(target))
    if not norm:
        return []
    target /= norm
    best: list[tuple[float, int]] = []
    rows = ksearch.vectors(s, project_id, collection_ids=ids, filters=filters, cap=VECTOR_SCAN_CAP)
    for at in range(0, len(rows), 2048):
        batch = [(c, b) for c, b in rows[at : at + 2048] if len(b) == 4 * len(target)]
        if not batch:
            continue
        matrix = np.frombuffer(b"".join(b for _, b in batch), dtype="<f4").reshape(len(batch), len(target))
        norms = np.linalg.norm(matrix, axis=1)
        norms[norms == 0] = 1.0
        scores = (matrix @ target) / norms
        best += [(float(v), c) for v, (c, _) in zip(scores.tolist(), batch, strict=True)]
        best.sort(key=lambda x: (-x[0], x[1]))
        del best[pool:]
    found = ksearch.matches_by_chunk(s, [c for _, c in best])
    return [replace(found[c], score=v) for v, c in best if c in found]


def _fuse(text_hits: list[ksearch.Match], vector_hits: list[ksearch.Match], size: int) -> list[ksearch.Match]:
    """Reciprocal rank fusion of the two rankings (ties by chunk id)."""
    scores: dict[int, float] = {}
    by_id: dict[int, ksearch.Match] = {}
    for ranking in (text_hits, vector_hits):
        for rank, m in enumerate(ranking, start=1):
            scores[m.chunk_id] = scores.get(m.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            by_id.setdefault(m.chunk_id, m)
    best = sorted(scores, key=lambda c: (-scores[c], c))[:size]
    return [replace(by_id[c], score=scores[c]) for c in best]
