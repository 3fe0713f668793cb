"""Form values checked against a JSON Schema, a message per field (webui.validation)."""

from __future__ import annotations

from typing import Any

from webui.validation import field_errors, validator

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email"},
        "count": {"type": "integer", "minimum": 1, "maximum": 3},
    },
    "required": ["email"],
    "additionalProperties": False,
}


def test_fitting_values_have_no_errors() -> None:
    assert field_errors(SCHEMA, {"email": "a@example.org", "count": 2}) == {}


def test_one_message_per_field_and_whole_object_problems_under_the_empty_name() -> None:
    errors = field_errors(SCHEMA, {"email": "not an address", "count": 9, "extra": True})
    assert set(errors) == {"email", "count", ""}
    assert "email" in errors["email"] and "9" in errors["count"] and "extra" in errors[""]
    assert set(field_errors(SCHEMA, {})) == {""}  # a missing required field is the object's problem


def test_formats_are_checked() -> None:
    assert not validator(SCHEMA).is_valid({"email": "nope"})
    assert validator(SCHEMA).is_valid({"email": "a@example.org"})
