"""The one strict JSON reader: duplicate keys and non-JSON constants are refused."""

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
