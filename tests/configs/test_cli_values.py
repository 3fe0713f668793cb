"""`FIELD=VALUE` on the command line typed by the field (`webui.cli.configs_values.parse_value`,
pydantic's lax parsing of text): numbers and booleans from their usual spellings, every other
word refused naming what it is not."""

from __future__ import annotations

from typing import Any

import pytest

from webui.cli.configs_values import parse_value
from webui.workflows.configuration import ConfigField
from webui.workflows.params import Option


def _field(ftype: str) -> ConfigField:
    options = (Option("a"), Option("b")) if ftype in ("select", "multiselect") else ()
    return ConfigField(name="x", type=ftype, options=options)


@pytest.mark.parametrize(
    ("ftype", "text", "value"),
    [
        ("number", "3", 3),
        ("number", " -3 ", -3),
        ("number", "2.5", 2.5),
        ("number", "1e3", 1000.0),
        ("boolean", "yes", True),
        ("boolean", " ON ", True),
        ("boolean", "0", False),
        ("boolean", "False", False),
        ("multiselect", "a, b,", ["a", "b"]),
        ("multiselect", '["a", "b"]', ["a", "b"]),
        ("string", " kept as written ", " kept as written "),
        ("date", "2026-12-01", "2026-12-01"),
    ],
)
def test_a_value_is_typed_by_its_field(ftype: str, text: str, value: Any) -> None:
    parsed = parse_value(_field(ftype), text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("ftype", "text", "message"),
    [
        ("number", "many", "expected a number, got 'many'"),
        ("number", "", "expected a number, got ''"),
        ("number", "inf", "expected a finite number, got 'inf'"),
        ("number", "nan", "expected a finite number, got 'nan'"),
        ("boolean", "maybe", "expected true or false, got 'maybe'"),
        ("multiselect", "[1,", "not a JSON array"),
        ("multiselect", '["a"] x', "not a JSON array"),
        ("multiselect", "[" * 100_000, "not a JSON array"),
    ],
)
def test_a_word_that_is_not_of_the_type_is_refused_naming_it(ftype: str, text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_value(_field(ftype), text)
    assert str(err.value).startswith(message), err.value
