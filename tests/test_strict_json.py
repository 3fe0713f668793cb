"""The one strict JSON reader: duplicate keys and non-JSON constants are refused; nesting, arrays
and objects and values are counted on the text (strings left out) before it is parsed."""

from __future__ import annotations

import json

import pytest

from webui import strict_json


def test_plain_json_loads_as_usual() -> None:
    assert strict_json.loads('{"a": [1, 2.5, null, true], "b": {"c": "d"}}') == {
        "a": [1, 2.5, None, True],
        "b": {"c": "d"},
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"o": {"k": 1, "k": 1}}', "duplicate key 'k'"),
        ("[NaN]", "NaN is not valid JSON"),
        ('{"x": Infinity}', "Infinity is not valid JSON"),
        ("-Infinity", "-Infinity is not valid JSON"),
    ],
)
def test_ambiguous_or_non_json_documents_are_refused(text: str, message: str) -> None:
    with pytest.raises(strict_json.StrictJSONError) as caught:
        strict_json.loads(text)
    assert str(caught.value) == message


def test_syntax_errors_stay_json_decode_errors() -> None:
    with pytest.raises(json.JSONDecodeError):
        strict_json.loads('{"a": }')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"a": 1, "b": 2}, {"c": 3, "d": 4, "c": 5}]', "duplicate key 'c'"),
        ('{"a": 1, "b": 2, "b": 3, "a": 4}', "duplicate key 'b'"),  # the first one repeated
        ('{"é": 1, "é": 2}', "duplicate key 'é'"),
    ],
)
def test_the_first_duplicate_key_of_any_object_is_named(text: str, message: str) -> None:
    with pytest.raises(strict_json.StrictJSONError) as caught:
        strict_json.loads(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "text",
    [
        '["' + "[" * 200 + '"]',  # brackets in a string are text, not nesting
        '{"a": "' + "{" * 200 + '", "b": "]]]"}',
        '["\\"' + "[" * 200 + '"]',  # an escaped quote does not end the string
        '["\\\\", "' + "[" * 200 + '"]',  # an escaped backslash before the closing quote
        '["\\\\\\"' + "{" * 200 + '"]',
        '{"é[": "ü{' + "[" * 200 + '"}',  # UTF-8 never hides a quote or a bracket
    ],
)
def test_brackets_inside_strings_are_no_nesting(text: str) -> None:
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads(text.encode()) == json.loads(text)


def test_nesting_is_counted_on_the_text_as_the_value_holds_it() -> None:
    for levels in (1, 2, 3, 4):
        text = '{"a": [1, ' * levels + "0" + "]}" * levels
        assert strict_json.depth(strict_json.loads(text)) == 2 * levels
        strict_json.loads(text, max_depth=2 * levels)
        with pytest.raises(strict_json.StrictJSONError, match=f"deeper than {2 * levels - 1} levels"):
            strict_json.loads(text, max_depth=2 * levels - 1)
    # Many shallow siblings beside one deep branch: the deepest branch counts.
    text = "[" + "[[]]," * 1000 + "[" * 64 + "]" * 64 + "]"
    with pytest.raises(strict_json.StrictJSONError, match="deeper than 64 levels"):
        strict_json.loads(text)
    assert strict_json.depth(strict_json.loads("[" + "[[]]," * 1000 + "[" * 63 + "]" * 63 + "]")) == 64


def test_arrays_and_objects_and_values_are_counted_before_parsing() -> None:
    assert strict_json.loads("[[], {}]", max_containers=3) == [[], {}]
    with pytest.raises(
        strict_json.StrictJSONError, match=r"^the document holds more than 3 arrays and objects$"
    ):
        strict_json.loads("[[], {}, []]", max_containers=3)
    assert strict_json.loads('["[[[", "{{{"]', max_containers=1) == ["[[[", "{{{"]
    assert strict_json.loads("[1, 2, 3]", max_values=3) == [1, 2, 3]
    with pytest.raises(strict_json.StrictJSONError, match=r"^the document holds more than 3 values$"):
        strict_json.loads("[1, 2, 3, 4]", max_values=3)
    assert strict_json.loads('["a,b,c,d,e"]', max_values=1) == ["a,b,c,d,e"]
    # The default limits: 20,000 arrays and objects, 50,000 values.
    many = "[" + ",".join(["[]"] * strict_json.MAX_CONTAINERS) + "]"
    with pytest.raises(strict_json.StrictJSONError, match="more than 20000 arrays and objects"):
        strict_json.loads(many)
    assert len(strict_json.loads("[" + ",".join(["[]"] * (strict_json.MAX_CONTAINERS - 1)) + "]")) == 19_999
    with pytest.raises(strict_json.StrictJSONError, match="more than 50000 values"):
        strict_json.loads("[" + ",".join(["0"] * (strict_json.MAX_VALUES + 1)) + "]")


def test_a_document_of_more_strings_than_its_values_allow_is_refused_before_it_is_cut() -> None:
    """Strings are values or keys: past four quotes a value, the text is refused as holding
    too many values before it is cut into its strings (each a piece). Escaped quotes are no
    string's end."""
    assert strict_json.loads('{"a": "b", "c": "d"}', max_values=2) == {"a": "b", "c": "d"}
    assert strict_json.loads('["' + '\\"' * 100 + '"]', max_values=1) == ['"' * 100]
    with pytest.raises(strict_json.StrictJSONError, match=r"^the document holds more than 5 values$"):
        strict_json.loads("[" + ",".join(['""'] * 40) + "]", max_values=5)


@pytest.mark.parametrize("text", ["[[[", "[" * 5000, '["abc', '{"a": 1', '["\\"]', "]]]" + "[" * 100])
def test_unbalanced_texts_are_refused_as_before(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        strict_json.loads(text)
    assert isinstance(caught.value, json.JSONDecodeError | strict_json.StrictJSONError)


def test_numbers_and_strings_read_as_the_standard_parser_reads_them() -> None:
    text = '[12345678901234567890123, -0, 1e308, 2.5e-3, "NaN", "\\ud800", "\\u00e9"]'
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads("[" + "9" * strict_json.MAX_NUMBER_CHARS + "]") == [int("9" * 100)]
    assert strict_json.loads('["' + "9" * 5000 + '"]') == ["9" * 5000]  # a string of digits is no number
    with pytest.raises(UnicodeDecodeError):
        strict_json.loads(b'["\xff"]')


@pytest.mark.parametrize(
    "number", ["9" * 101, "9" * 5000, "-" + "9" * 100, "0." + "9" * 99, "1e" + "0" * 99, "9" * 4299]
)
def test_a_number_longer_than_its_limit_is_refused_before_it_is_read(number: str) -> None:
    """Python reads an integer's digits in quadratic time: an array of thousands of 4,299-digit
    integers held the GIL for seconds."""
    with pytest.raises(
        strict_json.StrictJSONError, match=r"^a number is written with more than 100 characters$"
    ):
        strict_json.loads('{"a": [1, ' + number + "]}")
    with pytest.raises(strict_json.StrictJSONError, match="more than 10 characters"):
        strict_json.loads("[12345678901]", max_number_chars=10)


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1E400", "0.5e309", "1" + "0" * 90 + "e300"])
def test_a_number_out_of_a_floats_range_is_refused_as_infinity_is(number: str) -> None:
    """Python reads `1e999` as Infinity, which JSON has no word for and the reader refuses by name."""
    with pytest.raises(strict_json.StrictJSONError, match=r"out of a float's range"):
        strict_json.loads('{"n": ' + number + "}")
    assert strict_json.loads("[1e308, -1e308, 1e-999, 0.1e309]") == [1e308, -1e308, 0.0, 1e308]
