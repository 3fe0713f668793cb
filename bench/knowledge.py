"""The knowledge base: indexing rate, index size and search latency on SQLite and PostgreSQL.

A deterministic generated corpus (seeded): a Zipf-like vocabulary (s = 1.05) of common English
words and a few thousand generated pseudo-words, ~5 KB per document (sentences of 6-18 words,
paragraphs of 3-6 sentences), metadata {"topic": one of 20, "year": 2000-2025}, spread over
5 collections. Every document is added through `KnowledgeService.add` (the real path: chunking,
stemming, one transaction per document with its audit event), with a fixed doc id.

A document makes ~6.7 chunks (chunks end at a sentence or word boundary between 500 and 1000
characters), so 10,000 documents are ~67k chunks: the default is 15,000 documents, indexed in
two steps: 1,500 (~10k chunks), then on to 15,000 (~100k chunks). After each step: documents/s
of the step, chunks, index size
(SQLite: the database file after a WAL checkpoint, plus any WAL left, and the FTS5 tables'
share by `dbstat`; PostgreSQL: pg_total_relation_size of the knowledge tables), then the query
mix. Query kinds, interleaved round-robin (each kind's own seeded queries):

- rare: one word of rank 2,000-4,000 in the vocabulary (~0.1-0.5% of the chunks)
- common: one of the 10 most frequent words (it is in nearly every chunk)
- two-term: two words of rank 50-500 (both required)
- phrase: two adjacent words taken from a random document, quoted
- filter: a word of rank 20-200 with the metadata filter {"topic": <one of 20>}
- collection: a word of rank 20-200 in one of the 5 collections

Each query is `KnowledgeService.search(..., limit=10)` (text mode: no embedding endpoint),
wall time per call; "store" is the same query's `webui.store.knowledge_search.search` alone (the SQL
and its rows, without the service's collection lookups, query parsing and snippets), timed on
the same query right after. p50 and p99 are nearest rank (`_common.percentile`).

Goals (the issue): search p99 <= 20 ms at 100k chunks on SQLite; indexing >= 500 documents/s.

Run: `python bench/knowledge.py [--sqlite|--postgres|--both] [--docs N] [--queries N] [--quick]
[--profile]`. PostgreSQL is Debian's (tests/pg.py starts it: initdb in a temp folder, fsync
off, stopped by its PID at the end).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests/pg.py (the throwaway PostgreSQL); last, so a PYTHONPATH webui wins

import _common  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402
from sqlmodel import Session  # noqa: E402

from webui.audit.log import AuditLog  # noqa: E402
from webui.knowledge import text as kt  # noqa: E402
from webui.knowledge.model import Actor, Limits, parse_filter  # noqa: E402
from webui.knowledge.search import RANKED_CANDIDATES  # noqa: E402
from webui.knowledge.service import KnowledgeService, NewDocument  # noqa: E402
from webui.store import knowledge as ks  # noqa: E402
from webui.store import knowledge_search as ksearch  # noqa: E402
from webui.store.db import make_engine, sqlite_url  # noqa: E402

SEED = 20261203
PROJECT = "bench"
ACTOR = Actor("bench", "cli")
COLLECTIONS = [f"c{i}" for i in range(5)]
TOPICS = [f"topic-{i:02d}" for i in range(20)]
DOC_CHARS = 5000
PSEUDO_WORDS = 4000
ZIPF_S = 1.05
KINDS = ("rare", "common", "two-term", "phrase", "filter", "collection")
GOAL_P99 = 0.020  # s, search p99 at 100k chunks on SQLite
GOAL_RATE = 500.0  # documents/s

COMMON_ENGLISH = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "been",
    "one",
    "all",
    "we",
    "their",
    "has",
    "would",
    "when",
    "if",
    "so",
    "no",
    "what",
    "can",
    "more",
    "said",
    "will",
    "about",
    "up",
    "out",
    "them",
    "some",
    "could",
    "other",
    "into",
    "its",
    "then",
    "two",
    "time",
    "these",
    "may",
    "like",
    "only",
    "first",
    "any",
    "new",
    "now",
    "such",
    "over",
    "very",
    "after",
    "most",
    "also",
    "made",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "states",
    "himself",
    "few",
    "house",
    "use",
    "during",
    "without",
    "again",
    "place",
    "american",
    "around",
    "however",
    "home",
    "small",
    "found",
    "thought",
    "went",
    "say",
    "part",
    "once",
    "general",
    "high",
    "upon",
    "school",
    "every",
    "does",
    "got",
    "united",
    "left",
    "number",
    "course",
    "war",
    "until",
    "always",
    "away",
    "something",
    "fact",
    "though",
    "water",
    "less",
    "public",
    "put",
    "think",
    "almost",
    "hand",
    "enough",
    "far",
    "took",
    "head",
    "yet",
    "government",
    "system",
    "better",
    "set",
    "told",
    "nothing",
    "night",
    "end",
    "why",
    "called",
    "didn",
    "find",
    "look",
    "going",
    "asked",
    "later",
    "knew",
    "point",
    "next",
    "program",
    "city",
    "business",
    "give",
    "group",
    "toward",
    "young",
    "days",
    "let",
    "room",
    "president",
    "side",
    "social",
    "given",
    "present",
    "several",
    "order",
    "national",
    "second",
    "possible",
    "rather",
    "per",
    "face",
    "among",
    "form",
    "important",
    "often",
    "things",
    "looked",
    "early",
    "white",
    "case",
    "john",
    "become",
    "large",
    "big",
    "need",
    "four",
    "within",
    "felt",
    "along",
    "children",
    "saw",
    "best",
    "church",
    "ever",
    "least",
    "power",
    "development",
    "light",
    "thing",
    "seemed",
    "family",
    "interest",
    "want",
    "members",
    "mind",
    "country",
    "area",
    "others",
    "done",
    "turned",
    "although",
    "open",
    "problem",
]


# --------------------------------------------------------------------------- the corpus


def _pseudo_words(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    onsets = [
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "j",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "z",
        "br",
        "cl",
        "dr",
        "fl",
        "gr",
        "pl",
        "pr",
        "st",
        "tr",
        "ch",
        "sh",
        "th",
    ]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
    codas = ["", "", "n", "r", "s", "l", "t", "m", "nd", "st", "rk", "ng"]
    out: list[str] = []
    while len(out) < n:
        syllables = rng.choice((2, 2, 3, 3, 4))
        word = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(syllables)) + rng.choice(codas)
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


@dataclass
class Corpus:
    """A Zipf-ranked vocabulary and seeded documents drawn from it."""

    seed: int = SEED
    vocabulary: list[str] = field(default_factory=list)
    cum_weights: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        english = list(dict.fromkeys(COMMON_ENGLISH))
        pseudo = _pseudo_words(rng, PSEUDO_WORDS, set(english))
        # English words first (they are the frequent ones), the pseudo-words after, shuffled in.
        head, tail = english[:60], english[60:] + pseudo
        rng.shuffle(tail)
        self.vocabulary = head + tail
        total = 0.0
        for rank in range(1, len(self.vocabulary) + 1):
            total += 1.0 / rank**ZIPF_S
            self.cum_weights.append(total)

    def document(self, number: int) -> tuple[str, str, dict[str, Any]]:
        """(collection, text, metadata) of document `number`, the same in every run."""
        rng = random.Random(self.seed * 1_000_003 + number)
        paragraphs: list[str] = []
        size = 0
        while size < DOC_CHARS:
            sentences = []
            for _ in range(rng.randint(3, 6)):
                words = rng.choices(self.vocabulary, cum_weights=self.cum_weights, k=rng.randint(6, 18))
                sentences.append(" ".join(words).capitalize() + ".")
            paragraph = " ".join(sentences)
            paragraphs.append(paragraph)
            size += len(paragraph) + 2
        body = f"Document {number}\n\n" + "\n\n".join(paragraphs)
        meta = {"topic": TOPICS[number % len(TOPICS)], "year": 2000 + number % 26, "n": number}
        return COLLECTIONS[number % len(COLLECTIONS)], body, meta


@dataclass(frozen=True)
class Query:
    kind: str
    text: str
    collection: str | None = None
    filter: dict[str, Any] | None = None


def queries(corpus: Corpus, kind: str, n: int, docs: int) -> list[Query]:
    rng = random.Random(f"{SEED}-{kind}")
    vocab = corpus.vocabulary
    out: list[Query] = []
    for _ in range(n):
        if kind == "rare":
            out.append(Query(kind, rng.choice(vocab[2000:4000])))
        elif kind == "common":
            out.append(Query(kind, rng.choice(vocab[:10])))
        elif kind == "two-term":
            a, b = rng.sample(vocab[50:500], 2)
            out.append(Query(kind, f"{a} {b}"))
        elif kind == "phrase":
            _, body, _ = corpus.document(rng.randrange(docs))
            words = body.split("\n\n", 2)[-1].replace(".", "").lower().split()
            at = rng.randrange(len(words) - 1)
            out.append(Query(kind, f'"{words[at]} {words[at + 1]}"'))
        elif kind == "filter":
            out.append(Query(kind, rng.choice(vocab[20:200]), filter={"topic": rng.choice(TOPICS)}))
        elif kind == "collection":
            out.append(Query(kind, rng.choice(vocab[20:200]), collection=rng.choice(COLLECTIONS)))
        else:
            raise ValueError(kind)
    return out


# --------------------------------------------------------------------------- databases


@contextmanager
def sqlite_database(root: Path) -> Iterator[tuple[str, Path]]:
    path = root / "knowledge.db"
    yield sqlite_url(path), path


@contextmanager
def postgres_database(root: Path) -> Iterator[tuple[str, None]]:
    """A throwaway cluster (tests/pg.py: Debian's binaries, fsync off), one migrated database;
    the postmaster is stopped by its PID."""
    from tests import pg

    bin_dir = pg._bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
    folder = root / "pg"
    folder.mkdir()
    os.chmod(root, 0o755)  # PostgreSQL runs as `postgres` when we are root
    pid, port, user = pg._start(bin_dir, folder)
    try:
        cluster = pg.PgCluster(port=port, user=user, folder=folder, pid=pid)
        cluster.create_database("knowledge")
        url = cluster.url("knowledge")
        engine = make_engine(url, check_schema=False)
        from webui.store.schema import upgrade_database

        upgrade_database(engine)
        engine.dispose()
        yield url, None
    finally:
        pg._stop_pid(pid, folder)


def index_size(engine: Engine, path: Path | None) -> tuple[int, str]:
    """(bytes, detail): the whole index as it sits on disk."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            assert path is not None
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            wal = Path(f"{path}-wal")
            total = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
            try:
                rows = conn.exec_driver_sql(
                    "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
                ).all()
            except Exception as exc:  # dbstat is a compile-time option
                return total, f"(no dbstat: {exc.__class__.__name__})"
            by = {name: int(size) for name, size in rows}
            fts = sum(v for k, v in by.items() if k.startswith("knowledge_fts"))
            chunks = by.get("knowledge_chunks", 0)
            return total, (
                f"FTS5 {_mib(fts)} ({fts / total:.0%}: data {_mib(by.get('knowledge_fts_data', 0))}, "
                f"content {_mib(by.get('knowledge_fts_content', 0))}), chunk text {_mib(chunks)}"
            )
        names = ("knowledge_fts", "knowledge_chunks", "knowledge_documents", "knowledge_meta")
        sizes = {
            n: int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": n}).scalar() or 0)
            for n in names
        }
        gin = int(conn.execute(text("SELECT pg_relation_size('ix_knowledge_fts')")).scalar() or 0)
        total = sum(sizes.values())
        return total, (
            f"knowledge_fts {_mib(sizes['knowledge_fts'])} (GIN {_mib(gin)}, "
            f"{sizes['knowledge_fts'] / total:.0%}), "
            f"chunks {_mib(sizes['knowledge_chunks'])}"
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


# --------------------------------------------------------------------------- phases


@dataclass
class Step:
    docs: int
    chunks: int
    seconds: float
    added: int
    size: int
    size_detail: str
    search: dict[str, list[float]] = field(default_factory=dict)
    store: dict[str, list[float]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.added / self.seconds


def index(kb: KnowledgeService, corpus: Corpus, first: int, last: int, batch: int) -> float:
    """Add documents first..last-1, `batch` a transaction (`add_many`, the path of imports and
    uploads of several files; 1: one `add` each); seconds spent adding (corpus generation
    excluded)."""
    spent = 0.0
    report = max(1, (last - first) // 5)
    for at in range(first, last, batch):
        items = []
        for n in range(at, min(last, at + batch)):
            collection, body, meta = corpus.document(n)
            items.append(NewDocument(collection, text=body, doc_id=f"doc-{n:06d}", metadata=meta))
        start = time.perf_counter()
        done = kb.add_many(PROJECT, items, actor=ACTOR)
        spent += time.perf_counter() - start
        assert all(d["status"] == "added" for d in done), done
        end = min(last, at + batch)
        if (end - first) // report != (at - first) // report:
            print(f"    {end:>7} documents, {(end - first) / spent:7.1f} documents/s", flush=True)
    return spent


def chunk_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT COUNT(*) FROM knowledge_chunks").scalar() or 0)


def store_search(kb: KnowledgeService, q: Query) -> int:
    """The store's query alone, as the service issues it (one language)."""
    with Session(kb.engine) as s:
        ids = None
        if q.collection is not None:
            row = ks.collection(s, PROJECT, q.collection)
            assert row is not None and row.id is not None
            ids = [row.id]
        parsed = kt.parse_query(q.text, kt.DEFAULT_LANGUAGE)
        filters = parse_filter(q.filter)
        floor = ksearch.candidate_floor(
            s, PROJECT, parsed, collection_ids=ids, filters=filters, cap=RANKED_CANDIDATES
        )
        return len(
            ksearch.search(s, PROJECT, parsed, collection_ids=ids, filters=filters, limit=10, floor=floor)
        )


def run_queries(kb: KnowledgeService, mix: dict[str, list[Query]], step: Step, warmup: int) -> None:
    def one(q: Query) -> float:
        start = time.perf_counter()
        found = kb.search(PROJECT, q.text, collection=q.collection, filter=q.filter, limit=10)
        took = time.perf_counter() - start
        assert found["mode"] == "text"
        return took

    for qs in mix.values():  # warm-up: page cache, statement cache
        for q in qs[:warmup]:
            one(q)
            store_search(kb, q)
    step.search = {k: [] for k in mix}
    step.store = {k: [] for k in mix}
    hits: dict[str, int] = {k: 0 for k in mix}
    n = len(next(iter(mix.values())))
    for i in range(n):
        for kind, qs in mix.items():
            step.search[kind].append(one(qs[i]))
            start = time.perf_counter()
            hits[kind] += store_search(kb, qs[i]) > 0
            step.store[kind].append(time.perf_counter() - start)
    empty = {k: n - v for k, v in hits.items() if v < n}
    if empty:
        print(f"    queries with no hit: {empty}")


def match_counts(engine: Engine, corpus: Corpus) -> str:
    """How many chunks one query of each frequency band matches (what the ranking must sort)."""
    out = []
    with engine.connect() as conn:
        for label, word in (("top-1", corpus.vocabulary[0]), ("rank 100", corpus.vocabulary[100])):
            stem = kt.stem(word, kt.DEFAULT_LANGUAGE)
            if engine.dialect.name == "sqlite":
                sql = "SELECT COUNT(*) FROM knowledge_fts WHERE knowledge_fts MATCH :q"
                n = conn.execute(text(sql), {"q": f'"{stem}"'}).scalar()
            else:
                sql = "SELECT COUNT(*) FROM knowledge_fts WHERE tsv @@ to_tsquery('simple', :q)"
                n = conn.execute(text(sql), {"q": f"'{stem}'"}).scalar()
            out.append(f"{label} {word!r}: {n} chunks")
    return ", ".join(out)


def profile_indexing(kb: KnowledgeService, corpus: Corpus, first: int, n: int) -> None:
    """cProfile of `n` more documents (not in the figures): where an add spends its time."""
    docs = [corpus.document(i) for i in range(first, first + n)]
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    for i, (collection, body, meta) in enumerate(docs):
        kb.add(PROJECT, collection, actor=ACTOR, text=body, doc_id=f"doc-{first + i:06d}", metadata=meta)
    prof.disable()
    took = time.perf_counter() - start
    print(f"\n  cProfile of {n} more adds ({n / took:.1f} documents/s under the profiler), cumulative:")
    stats = pstats.Stats(prof)
    total = sum(v[3] for k, v in stats.stats.items() if k[2] == "add" and k[0].endswith("service.py"))  # type: ignore[attr-defined]
    wanted = {
        ("service.py", "add"): "KnowledgeService.add, all",
        ("text.py", "terms"): "stemming (text.terms)",
        ("text.py", "chunk_spans"): "chunking (text.chunk_spans)",
        ("service.py", "_check_caps"): "caps: ks.usage (a sum over the project's documents)",
        ("knowledge.py", "add_document"): "ks.add_document (document, chunks, FTS and meta rows)",
        ("knowledge.py", "collection"): "ks.collection lookups",
        ("knowledge.py", "document"): "ks.document lookup",
        ("service.py", "_audit"): "audit event + commit",
        ("<method 'commit' of 'sqlite3.Connection' objects>", ""): "sqlite3 commit",
        ("<method 'execute' of 'sqlite3.Cursor' objects>", ""): "sqlite3 execute (SQL run)",
        ("<method 'executemany' of 'sqlite3.Cursor' objects>", ""): "sqlite3 executemany (SQL run)",
        ("psycopg", "wait"): "psycopg: waiting on the server (SQL run + round trips)",
    }
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for (wf, wfunc), label in wanted.items():
            own = (wf == "psycopg" and "psycopg" in file) or (file.endswith(wf) and "webui" in file)
            if (wfunc and own and func == wfunc) or (not wfunc and func == wf):
                print(f"    {label:<56} {ct / n * 1000:7.2f} ms per document ({ct / total:.0%})")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    print("\n".join("    " + line for line in buf.getvalue().splitlines() if line.strip()))


def profile_searches(kb: KnowledgeService, mix: dict[str, list[Query]]) -> None:
    """cProfile of the whole mix once more, plus the raw SQL of the common-term query with
    and without ranking (what the FTS engine spends on matching vs sorting)."""
    prof = cProfile.Profile()
    prof.enable()
    for qs in mix.values():
        for q in qs:
            kb.search(PROJECT, q.text, collection=q.collection, filter=q.filter, limit=10)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
    print("\n  cProfile of the query mix (cumulative, top 25):")
    print("\n".join("    " + line for line in buf.getvalue().splitlines() if line.strip()))
    _raw_sql(kb.engine, mix)


def _timed(fn: Callable[[], Any], n: int = 15) -> float:
    fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return _common.percentile(samples, 50)


def _raw_sql(engine: Engine, mix: dict[str, list[Query]]) -> None:
    """The common and the filter query as bare SQL variants, p50 of 15."""
    common = kt.parse_query(mix["common"][0].text, kt.DEFAULT_LANGUAGE)
    pg = engine.dialect.name == "postgresql"
    q = common.tsquery() if pg else common.fts5()
    variants: dict[str, str]
    if pg:
        variants = {
            "count of matches": "SELECT COUNT(*) FROM knowledge_fts WHERE tsv @@ to_tsquery('simple', :q)",
            "top 10 by ts_rank_cd, bare": "SELECT chunk_id FROM knowledge_fts f, to_tsquery('simple', :q) q"
            " WHERE f.tsv @@ q ORDER BY ts_rank_cd(f.tsv, q, 1) DESC, chunk_id LIMIT 10",
            "top 10, no ranking": "SELECT chunk_id FROM knowledge_fts"
            " WHERE tsv @@ to_tsquery('simple', :q) LIMIT 10",
        }
    else:
        variants = {
            "count of matches": "SELECT COUNT(*) FROM knowledge_fts WHERE knowledge_fts MATCH :q",
            "top 10 by bm25, bare (ORDER BY rank)": "SELECT rowid FROM knowledge_fts"
            " WHERE knowledge_fts MATCH :q ORDER BY rank LIMIT 10",
            "top 10 by -bm25() DESC, rowid (as the store)": "SELECT rowid FROM knowledge_fts"
            " WHERE knowledge_fts MATCH :q ORDER BY -bm25(knowledge_fts) DESC, rowid LIMIT 10",
            "the store's query (joins + sort)": "SELECT c.id, -bm25(knowledge_fts) AS score"
            " FROM knowledge_fts"
            " JOIN knowledge_chunks c ON c.id = knowledge_fts.rowid"
            " JOIN knowledge_documents d ON d.id = c.document_id"
            " JOIN knowledge_collections k ON k.id = d.collection_id"
            " WHERE knowledge_fts MATCH :q AND d.project_id = :p ORDER BY score DESC, c.id LIMIT 10",
            "ranked in FTS first, then joined": "SELECT c.id, f.score FROM"
            " (SELECT rowid AS id, -bm25(knowledge_fts)"
            " AS score FROM knowledge_fts WHERE knowledge_fts MATCH :q ORDER BY rank LIMIT 10) f"
            " JOIN knowledge_chunks c ON c.id = f.id JOIN knowledge_documents d ON d.id = c.document_id"
            " WHERE d.project_id = :p ORDER BY f.score DESC, c.id",
            "top 10, no ranking": "SELECT rowid FROM knowledge_fts WHERE knowledge_fts MATCH :q LIMIT 10",
        }
    print(f"\n  bare SQL for the common term {mix['common'][0].text!r} ({q}), p50 of 15:")
    with engine.connect() as conn:
        for label, sql in variants.items():
            took = _timed(lambda sql=sql: conn.execute(text(sql), {"q": q, "p": PROJECT}).all())
            print(f"    {label:<48} {took * 1000:8.2f} ms")
        service_overhead = _timed(lambda: [ks.collections(Session(bind=conn), PROJECT)])
        print(f"    {'ks.collections (per search without collection)':<48} {service_overhead * 1000:8.2f} ms")


# --------------------------------------------------------------------------- report


def _p(samples: list[float], q: float) -> float:
    return _common.percentile(samples, q) * 1000


def print_step(dialect: str, step: Step) -> None:
    print(
        f"\n  {dialect} at {step.docs} documents / {step.chunks} chunks: "
        f"{step.rate:.1f} documents/s over the {step.added} added in this step, "
        f"index {_mib(step.size)} ({step.size_detail})"
    )
    print(f"    {'kind':<12} {'p50 ms':>8} {'p99 ms':>8}   {'store p50':>9} {'store p99':>9}")
    for kind in (*step.search, "overall"):
        if kind == "overall":
            s = [x for v in step.search.values() for x in v]
            t = [x for v in step.store.values() for x in v]
        else:
            s, t = step.search[kind], step.store[kind]
        print(f"    {kind:<12} {_p(s, 50):8.2f} {_p(s, 99):8.2f}   {_p(t, 50):9.2f} {_p(t, 99):9.2f}")


def verdict(what: str, value: float, goal: float, unit: str, lower_is_better: bool) -> str:
    ok = value <= goal if lower_is_better else value >= goal
    said = "meets" if ok else "MISSES"
    return f"  {what}: {value:.1f} {unit} = {value / goal:.2f}x the {goal:g} {unit} goal: {said}"


def run(
    dialect: str, root: Path, corpus: Corpus, docs: int, nq: int, profile: bool, batch: int
) -> list[Step]:
    opener = sqlite_database if dialect == "sqlite" else postgres_database
    with opener(root) as (url, path):
        engine = make_engine(url)
        try:
            kb = KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits())
            steps: list[Step] = []
            done = 0
            for target in (max(1, docs // 10), docs):
                print(f"\n  [{dialect}] indexing documents {done}..{target - 1}", flush=True)
                spent = index(kb, corpus, done, target, batch)
                added, done = target - done, target
                size, detail = index_size(engine, path)
                step = Step(done, chunk_count(engine), spent, added, size, detail)
                print(f"    matches: {match_counts(engine, corpus)}")
                mix = {k: queries(corpus, k, nq, done) for k in KINDS}
                run_queries(kb, mix, step, warmup=max(2, nq // 10))
                print_step(dialect, step)
                steps.append(step)
            if profile:
                profile_searches(kb, mix)
                profile_indexing(kb, corpus, docs, max(20, docs // 100))
            return steps
        finally:
            engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--sqlite", action="store_const", dest="dialects", const=["sqlite"])
    which.add_argument("--postgres", action="store_const", dest="dialects", const=["postgresql"])
    which.add_argument("--both", action="store_const", dest="dialects", const=["sqlite", "postgresql"])
    parser.add_argument(
        "--docs",
        type=int,
        default=None,
        help="documents in all (default 15000: ~100k chunks; searched at /10 too)",
    )
    parser.add_argument("--queries", type=int, default=None, help="measured queries per kind (default 200)")
    parser.add_argument(
        "--batch",
        type=int,
        default=100,
        help="documents a transaction when indexing (add_many; 1: one add each)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke check: 500 documents, 20 queries per kind"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the query mix and time bare SQL variants"
    )
    args = parser.parse_args()
    dialects = args.dialects or ["sqlite"]
    docs = args.docs or (500 if args.quick else 15_000)
    nq = args.queries or (20 if args.quick else 200)
    if not (10 <= docs <= 100_000 and 5 <= nq <= 5000):
        parser.error("--docs 10..100000, --queries 5..5000")
    print("Knowledge base: indexing and full-text search (KnowledgeService, text mode)")
    print(_common.machine_line())
    corpus = Corpus()
    print(
        f"corpus: seed {SEED}, {len(corpus.vocabulary)} words (Zipf s={ZIPF_S}), "
        f"~{DOC_CHARS} chars per document, "
        f"{docs} documents in {len(COLLECTIONS)} collections; {nq} queries per kind, limit 10"
    )
    results: dict[str, list[Step]] = {}
    for dialect in dialects:
        root = Path(tempfile.mkdtemp(prefix=f"shbench-knowledge-{dialect}-"))
        started: _common.ProcMap = {}
        try:
            results[dialect] = run(dialect, root, corpus, docs, nq, args.profile, args.batch)
            started = _common.descendants()
        finally:
            _common.report_leftovers(dialect, _common.stop_pids(started))
            shutil.rmtree(root, ignore_errors=True)
    print("\nSummary (p50 / p99 ms of KnowledgeService.search, all kinds)")
    print(
        f"  {'database':<11} {'documents':>9} {'chunks':>7} {'docs/s':>7} {'index':>10}   "
        f"{'p50':>6} {'p99':>6}"
    )
    for dialect, steps in results.items():
        for st in steps:
            every = [x for v in st.search.values() for x in v]
            print(
                f"  {dialect:<11} {st.docs:>9} {st.chunks:>7} {st.rate:>7.1f} {_mib(st.size):>10}   "
                f"{_p(every, 50):6.2f} {_p(every, 99):6.2f}"
            )
    print("\nGoals")
    for dialect, steps in results.items():
        last = steps[-1]
        every = [x for v in last.search.values() for x in v]
        rate = sum(s.added for s in steps) / sum(s.seconds for s in steps)
        print(
            verdict(
                f"{dialect} search p99 at {last.chunks} chunks", _p(every, 99), GOAL_P99 * 1000, "ms", True
            )
        )
        worst = max(last.search, key=lambda k: _common.percentile(last.search[k], 99))
        print(f"    (worst kind: {worst}, p99 {_p(last.search[worst], 99):.1f} ms)")
        print(
            verdict(
                f"{dialect} indexing, {sum(s.added for s in steps)} documents",
                rate,
                GOAL_RATE,
                "documents/s",
                False,
            )
        )
        if dialect != "sqlite":
            print("    (the p99 goal is stated for SQLite; PostgreSQL's is shown against it for comparison)")


if __name__ == "__main__":
    main()
