"""The stored schema of a `ctx.ask` question: the elicitation form, with file fields asking
for uploaded files of the project (as a tool's server-mode file params do)."""

from __future__ import annotations

from webui.workflows.params import parse_params
from webui.workflows.schema import elicitation_schema, form_blockers, question_schema

FILE_ITEM = {
    "type": "object",
    "properties": {"id": {"type": "string"}},
    "required": ["id"],
    "additionalProperties": False,
}


def test_file_fields_ask_for_uploads_and_the_rest_stays_the_elicitation_form() -> None:
    params = parse_params(
        [
            {"name": "doc", "type": "file", "required": True, "title": "Signed form"},
            {"name": "more", "type": "file", "multiple": True},
            {"name": "note", "type": "string", "format": "date-time"},
        ],
        where="test",
    )
    schema = question_schema(params)
    assert schema["required"] == ["doc"]
    assert schema["properties"]["doc"] == {
        **FILE_ITEM,
        "title": "Signed form",
        "description": 'An uploaded file of this project, as {"id": "wf_..."} (upload with POST .../files)',
    }
    more = schema["properties"]["more"]
    assert (more["type"], more["items"], more["title"]) == ("array", FILE_ITEM, "more")
    assert schema["properties"]["note"] == elicitation_schema(params)["properties"]["note"]
    assert form_blockers(params) == ["'doc' is a file field", "'more' is a file field"]


def test_without_file_fields_it_is_the_elicitation_form() -> None:
    params = parse_params([{"name": "n", "type": "number", "required": True, "default": 2}], where="test")
    assert question_schema(params) == elicitation_schema(params)
