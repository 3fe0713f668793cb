"""`datetime-local` answers: the browser's wall-clock time plus its offset from UTC (the
hidden `tzoffset:<field>` control static/js/app.js fills) become one UTC instant."""

from __future__ import annotations

import pytest
from starlette.datastructures import FormData

from webui.web import forms
from webui.web.forms import local_to_utc, offset_key

SCHEMA = {
    "type": "object",
    "properties": {"when": {"type": "string", "format": "date-time", "title": "When"}},
    "required": ["when"],
}


@pytest.mark.parametrize(
    ("raw", "offset", "expected"),
    [
        ("2026-03-01T09:30", 0, "2026-03-01T09:30:00Z"),
        ("2026-03-01T09:30", 60, "2026-03-01T08:30:00Z"),  # Paris in winter
        ("2026-03-01T09:30", -300, "2026-03-01T14:30:00Z"),  # New York in winter
        ("2026-03-01T09:30", 330, "2026-03-01T04:00:00Z"),  # India, half an hour
        ("2026-03-01T09:30", 345, "2026-03-01T03:45:00Z"),  # Nepal, a quarter
        ("2026-03-01T09:30", -210, "2026-03-01T13:00:00Z"),  # Newfoundland, half an hour west
        ("2026-03-01T09:30", -570, "2026-03-01T19:00:00Z"),  # the Marquesas
        ("2026-03-01T09:30", 630, "2026-02-28T23:00:00Z"),  # Lord Howe: back over midnight, into February
        ("2026-12-31T23:15", -600, "2027-01-01T09:15:00Z"),  # Hawaii: over the new year
        ("2024-02-29T00:10", 60, "2024-02-28T23:10:00Z"),  # a leap day
        ("2026-03-01T09:30:15", 840, "2026-02-28T19:30:15Z"),  # seconds kept; Kiribati, +14 h
        ("2026-03-01 09:30", 120, "2026-03-01T07:30:00Z"),  # a space instead of the T
    ],
)
def test_a_wall_clock_time_and_the_browsers_offset_make_one_utc_instant(
    raw: str, offset: int, expected: str
) -> None:
    assert local_to_utc(raw, offset) == expected


def test_without_an_offset_the_time_is_taken_as_utc() -> None:
    """No script ran (the offset field is empty): the old reading, stated on the page."""
    assert local_to_utc("2026-03-01T09:30", None) == "2026-03-01T09:30:00Z"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-03-01T09:30:00Z", "2026-03-01T09:30:00Z"),
        ("2026-03-01T09:30:00+05:30", "2026-03-01T04:00:00Z"),
        ("2026-03-01T09:30-03:30", "2026-03-01T13:00:00Z"),
    ],
)
def test_a_time_that_names_its_zone_keeps_it_and_ignores_the_browser_offset(raw: str, expected: str) -> None:
    assert local_to_utc(raw, 600) == expected


@pytest.mark.parametrize(
    "raw", ["2026-03-01", "tomorrow", "2026-13-01T09:30", "2026-03-01T25:00", "2026-03-01T09"]
)
def test_what_is_not_a_date_and_time_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="not a valid date-time"):
        local_to_utc(raw, 0)


@pytest.mark.parametrize("offset", [18 * 60 + 1, -18 * 60 - 1])
def test_an_offset_no_zone_can_have_is_refused(offset: int) -> None:
    with pytest.raises(ValueError, match="not a valid time zone offset"):
        local_to_utc("2026-03-01T09:30", offset)


def form(**fields: str) -> FormData:
    return FormData(list(fields.items()))


def test_parse_reads_the_offset_beside_each_field() -> None:
    data = FormData([("p-when", "2026-03-01T09:30"), (offset_key("p-when"), "330")])
    assert forms.parse(SCHEMA, data, prefix="p-") == ({"when": "2026-03-01T04:00:00Z"}, {})
    assert forms.parse(SCHEMA, form(when="2026-03-01T09:30")) == ({"when": "2026-03-01T09:30:00Z"}, {})


def test_parse_names_the_field_of_a_bad_time_or_offset() -> None:
    assert forms.parse(SCHEMA, form(when="soon")) == ({}, {"when": "not a valid date-time"})
    bad_offset = FormData([("when", "2026-03-01T09:30"), (offset_key("when"), "east")])
    assert forms.parse(SCHEMA, bad_offset) == ({}, {"when": "not a valid time zone offset"})
    assert forms.parse(SCHEMA, form(when="")) == ({}, {"when": "required"})


def test_a_date_time_field_gets_the_hidden_offset_control() -> None:
    [field] = forms.fields(SCHEMA)
    assert field.input_type == "datetime-local"
    assert offset_key("p-when") == "tzoffset:p-when"
