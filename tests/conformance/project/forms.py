"""Schemas and forms of the conformance fixture: questions asked with a JSON Schema
(SEP-1034 defaults, SEP-1330 enums, the plain elicitation), a tool whose inputSchema is
full JSON Schema 2020-12, and a param mirrored as a custom header (SEP-2243)."""

import json

DEFAULTS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}

ENUMS = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}

CONTACT = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}


def _answered(content):
    action = "accept" if content is not None else "decline"
    return f"Elicitation completed: action={action}, content={json.dumps(content)}"


def test_elicitation_sep1034_defaults(ctx):
    return _answered(ctx.ask("Defaults", DEFAULTS))


def test_elicitation_sep1330_enums(ctx):
    return _answered(ctx.ask("Choices", ENUMS))


def test_elicitation(ctx):
    content = ctx.ask("Your information", CONTACT, message=ctx.params["message"])
    action = "accept" if content is not None else "decline"
    return f"User response: <action: {action}, content: {json.dumps(content)}>"


def json_schema_2020_12_tool(ctx):
    return {"received": ctx.params}


def test_custom_header(ctx):
    return f"Region: {ctx.params['region']}"


# Input rounds (SEP-2322): questions named by the handler, so the client answers by key,
# in a retry or ahead, in its first call.
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
COLOR = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}


def test_input_required_result_elicitation(ctx):
    answer = ctx.ask("Your name", NAME, message="What is your name?", key="user_name")
    return f"Hello, {answer['name'] if answer else 'nobody'}!"


def test_input_required_result_request_state(ctx):
    answer = ctx.ask("Confirm", OK, message="Please confirm", key="confirm")
    return f"state-ok: confirmed={bool(answer and answer['ok'])}"


def test_input_required_result_multi_round(ctx):
    first = ctx.ask("Step 1", NAME, message="Step 1: What is your name?", key="step1")
    second = ctx.ask("Step 2", COLOR, message="Step 2: What is your favorite color?", key="step2")
    name = first["name"] if first else "nobody"
    return f"{name} likes {second['color'] if second else 'no color'}"


def test_input_required_result_tampered_state(ctx):
    answer = ctx.ask("Confirm", OK, message="Please confirm", key="confirm")
    return f"confirmed={bool(answer and answer['ok'])}"
