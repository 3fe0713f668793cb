"""Text as the knowledge base sees it: words, their stems, chunks, queries and snippets.

Both databases index the same thing: the stems this module makes, joined by spaces. SQLite's
FTS5 and PostgreSQL's `simple` configuration only split them again, so a query matches the
same chunks on either, and no query text ever reaches either engine's own query syntax.

Words are runs of letters and digits (`_` and punctuation separate them); each CJK character
is a word of its own, so text without spaces is still searchable (a query word of several
such characters becomes a phrase). Stems come from the Snowball stemmer (PyStemmer) of the collection's
language, or are the lower-cased words themselves for `none`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

import Stemmer  # PyStemmer: the Snowball stemmers in C

NO_STEMMING = "none"
DEFAULT_LANGUAGE = "english"
CHUNK_CHARS = 1000  # a chunk's target length; it ends at a paragraph, sentence or word boundary
SNIPPET_WORDS = 30  # the words a snippet shows around its best match
MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_PHRASE_RE = re.compile(r'"([^"]*)"?')
_CJK_RE = re.compile(rf"[{_CJK}]")


class QueryRefused(ValueError):
    """A query with nothing to search for, or too long."""


def languages() -> list[str]:
    """Every language a collection may stem for, `none` first."""
    return [NO_STEMMING, *sorted(Stemmer.algorithms())]


def check_language(language: str) -> str:
    if language != NO_STEMMING and language not in Stemmer.algorithms():
        raise ValueError(
            f"unknown language {language!r}"
            f" (use {NO_STEMMING!r} or a Snowball language, e.g. english, german)"
        )
    return language


@functools.lru_cache(maxsize=64)
def _stemmer(language: str) -> Stemmer.Stemmer | None:
    return None if language == NO_STEMMING else Stemmer.Stemmer(language, 50_000)


def stem(word: str, language: str) -> str:
    lowered = word.lower()
    found = _stemmer(language)
    return lowered if found is None else found.stemWord(lowered)


def words(text: str) -> Iterator[re.Match[str]]:
    return _WORD_RE.finditer(text)


def terms(text: str, language: str) -> str:
    """What the index holds for `text`: its stems, space separated."""
    # Lower-cased word by word, as a query's words are: lower-casing the whole text first
    # could split a word differently (a dotted İ becomes i and a combining mark).
    if text.isascii():
        lowered = _WORD_RE.findall(text.lower())
    else:
        lowered = [w.lower() for w in _WORD_RE.findall(text)]
    found = _stemmer(language)
    return " ".join(lowered if found is None else found.stemWords(lowered))


@dataclass(frozen=True)
class Query:
    """A parsed query: every phrase must match (a phrase is one or more stems in order)."""

    phrases: tuple[tuple[str, ...], ...]

    @property
    def stems(self) -> frozenset[str]:
        return frozenset(s for phrase in self.phrases for s in phrase)

    def fts5(self, prefix: str = "") -> str:
        """SQLite FTS5 MATCH text: each phrase double-quoted (stems hold no quotes), each
        stem after `prefix` (how the index spells it)."""
        return " ".join('"' + " ".join(prefix + s for s in p) + '"' for p in self.phrases)

    def tsquery(self) -> str:
        """PostgreSQL to_tsquery('simple', …) text: phrases AND-ed, words of a phrase adjacent."""
        return " & ".join("(" + " <-> ".join(f"'{s}'" for s in p) + ")" for p in self.phrases)


def parse_query(text: str, language: str) -> Query:
    """Words are required; "quoted words" must appear in that order; a word of several CJK
    characters is such a phrase. Every other character is only a separator."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryRefused(f"the query is longer than {MAX_QUERY_CHARS} characters")
    phrases: list[tuple[str, ...]] = []
    position = 0
    for quoted in _PHRASE_RE.finditer(text):
        phrases += _loose_phrases(text[position : quoted.start()], language)
        inside = tuple(stem(m.group(), language) for m in words(quoted.group(1)))
        if inside:
            phrases.append(inside)
        position = quoted.end()
    phrases += _loose_phrases(text[position:], language)
    unique = tuple(dict.fromkeys(phrases))
    if not unique:
        raise QueryRefused("the query has no words to search for")
    if sum(len(p) for p in unique) > MAX_QUERY_TERMS:
        raise QueryRefused(f"the query has more than {MAX_QUERY_TERMS} words")
    return Query(unique)


def _loose_phrases(text: str, language: str) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    run: list[str] = []  # adjacent CJK characters: one phrase
    last_end = -1
    for m in words(text):
        is_cjk = bool(_CJK_RE.fullmatch(m.group()))
        if run and (not is_cjk or m.start() != last_end):
            out.append(tuple(run))
            run = []
        if is_cjk:
            run.append(m.group())
        else:
            out.append((stem(m.group(), language),))
        last_end = m.end()
    if run:
        out.append(tuple(run))
    return out


# --------------------------------------------------------------------------- chunks


def chunk_spans(text: str, size: int = CHUNK_CHARS) -> list[tuple[int, int]]:
    """(start, end) of each chunk: consecutive, covering the whole text, each at most about
    `size` characters, ending after a blank line, a sentence or a word where one is near."""
    spans: list[tuple[int, int]] = []
    start = 0
    n = len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            end = _boundary(text, start, end)
        spans.append((start, end))
        start = end
    return spans


def _boundary(text: str, start: int, end: int) -> int:
    floor = start + max(1, (end - start) // 2)  # never a chunk of less than half the size
    for sep in ("\n\n", "\n", ". ", "! ", "? ", "; ", " "):
        at = text.rfind(sep, floor, end)
        if at != -1:
            return at + len(sep)
    return end


# --------------------------------------------------------------------------- snippets


@dataclass(frozen=True)
class Snippet:
    text: str
    highlights: tuple[tuple[int, int], ...]  # [start, end) of each matching word in `text`

    def parts(self) -> list[tuple[str, bool]]:
        """The text cut into (piece, highlighted) for a template to render piece by piece."""
        out: list[tuple[str, bool]] = []
        at = 0
        for start, end in self.highlights:
            if start > at:
                out.append((self.text[at:start], False))
            out.append((self.text[start:end], True))
            at = end
        if at < len(self.text):
            out.append((self.text[at:], False))
        return out


def snippet(text: str, stems: frozenset[str], language: str, width: int = SNIPPET_WORDS) -> Snippet:
    """The `width` words of `text` holding the most distinct query stems (the earliest such
    window), with every matching word's position."""
    found = list(words(text))
    if not found:
        return Snippet(text[:200], ())
    matched = [s if s in stems else None for s in terms(text, language).split(" ")]
    if len(matched) != len(found):  # a stemmer that split or dropped a word: no highlights
        matched = [None] * len(found)
    best, best_score = 0, -1
    for first in range(0, max(1, len(found) - width + 1)):
        score = len({s for s in matched[first : first + width] if s is not None})
        if score > best_score:
            best, best_score = first, score
            if best_score == len(stems):
                break
    last = min(len(found), best + width) - 1
    lo = 0 if best == 0 else found[best].start()
    hi = len(text) if last == len(found) - 1 else found[last].end()
    prefix = "" if lo == 0 else "\u2026"
    suffix = "" if hi == len(text) else "\u2026"
    shift = lo - len(prefix)
    marks = tuple(
        (found[i].start() - shift, found[i].end() - shift)
        for i in range(best, last + 1)
        if matched[i] is not None
    )
    return Snippet(prefix + text[lo:hi] + suffix, marks)
