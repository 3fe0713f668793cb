"""Words, stems, queries, chunks and snippets: the part of the knowledge base both databases
share, so what it makes is what either index holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webui.knowledge import text as kt


def test_words_are_stemmed_by_the_language_and_cjk_characters_are_words_of_their_own() -> None:
    assert kt.terms("Running RUNS quickly_now", "english") == "run run quick now"
    assert kt.terms("Running RUNS", "none") == "running runs"
    assert kt.terms("Häuser laufen", "german") == "haus lauf"
    assert kt.terms("知识库 search", "english") == "知 识 库 search"


def test_an_unknown_language_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown language 'klingon'.*english"):
        kt.check_language("klingon")
    assert kt.languages()[0] == "none" and "english" in kt.languages()


def test_a_query_is_words_and_quoted_phrases_and_its_syntax_characters_are_separators() -> None:
    q = kt.parse_query('runner "Quick  brown" 知识 NEAR(x) col:val * ^ - "unclosed', "english")
    assert q.phrases == (("runner",), ("quick", "brown"), ("知", "识"), ("near",), ("x",), ("col",), ("val",),
                         ("unclos",))  # fmt: skip
    assert q.fts5() == '"runner" "quick brown" "知 识" "near" "x" "col" "val" "unclos"'
    assert q.tsquery().startswith("('runner') & ('quick' <-> 'brown') & ('知' <-> '识')")


@pytest.mark.parametrize("query", ["", "   ", '""', "* ( ) : ^ - + ~ | & ! ' \\ / .", "___"])
def test_a_query_without_words_is_refused_clearly(query: str) -> None:
    with pytest.raises(kt.QueryRefused, match="no words to search for"):
        kt.parse_query(query, "english")


def test_a_query_too_long_or_with_too_many_words_is_refused() -> None:
    with pytest.raises(kt.QueryRefused, match="longer than 1000"):
        kt.parse_query("a" * 1001, "english")
    with pytest.raises(kt.QueryRefused, match="more than 32 words"):
        kt.parse_query(" ".join(f"w{i}" for i in range(33)), "english")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_query_parses_or_is_refused_and_its_engine_texts_hold_only_quoted_stems(query: str) -> None:
    try:
        q = kt.parse_query(query, "english")
    except kt.QueryRefused:
        return
    for phrase in q.phrases:
        for stem in phrase:
            assert stem and '"' not in stem and "'" not in stem and " " not in stem
    assert q.fts5().count('"') == 2 * len(q.phrases)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=5000), st.integers(min_value=20, max_value=2000))
def test_chunks_cover_the_text_exactly_in_order(text: str, size: int) -> None:
    spans = kt.chunk_spans(text, size)
    assert "".join(text[a:b] for a, b in spans) == text
    assert all(b > a and b - a <= size for a, b in spans)
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))


def test_chunks_end_at_paragraphs_then_sentences_then_words() -> None:
    text = ("Alpha beta gamma. " * 30).strip() + "\n\n" + "Delta epsilon. " * 30
    spans = kt.chunk_spans(text, 600)
    first = text[spans[0][0] : spans[0][1]]
    assert first.endswith("\n\n")
    second = text[spans[1][0] : spans[1][1]]
    assert second.endswith(". ")


def test_a_snippet_shows_the_best_window_and_marks_each_matching_word() -> None:
    text = "filler words here. " * 20 + "The runner was running in the park at dawn. " + "more filler. " * 20
    q = kt.parse_query("running park", "english")
    cut = kt.snippet(text, q.stems, "english", width=12)
    assert cut.text.startswith("…") and cut.text.endswith("…")
    marked = [cut.text[a:b] for a, b in cut.highlights]
    assert marked == ["running", "park"]
    assert [piece for piece, hit in cut.parts() if hit] == marked
    assert "".join(piece for piece, _ in cut.parts()) == cut.text


def test_a_short_text_is_its_own_snippet() -> None:
    cut = kt.snippet("Foxes run.", kt.parse_query("fox", "english").stems, "english")
    assert cut.text == "Foxes run." and cut.highlights == ((0, 5),)
