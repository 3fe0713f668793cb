"""A property-based fuzz of the JSON API (`/api/…`) of a real `steamharness serve`, generated
by schemathesis from the server's own `/openapi.json`: every operation, with data that fits
the document and data that does not, sent with the admin key and with no credential at all.
Whatever comes in, the answer is never a 5xx, never a Python traceback or pydantic's
internals, and every refusal is the API's error document `{"error": {"code", "message"}}`
with a stable code; the server logs no traceback.

The MCP endpoint, also in the document, is fuzzed over its own protocol in
test_fuzz_mcp.py. Reproducible: hypothesis runs derandomized, with no example database, and
a bounded number of examples per operation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import HELLO, LiveServer
from tests.security.fuzz_server import hello_server
from webui.mcp.openapi import MCP_PATH

if TYPE_CHECKING:  # schemathesis is imported by the tests that use it (seconds of import
    # in every test process that merely collects this module otherwise)
    from schemathesis.schemas import APIOperation

pytestmark = pytest.mark.slow

WAIT = 30.0  # bound on one answer
# Examples per operation (data that fits the document and data that does not): every
# operation of the document is fuzzed in each pass. With the admin key a request reaches
# the handlers, whose inputs are the search space; without a credential every one is the
# same 401 whatever it carries (webui/web/policies.py), so fewer examples cover it.
EXAMPLES = 24
EXAMPLES_WITHOUT_CREDENTIALS = 8
LEAKS = re.compile(
    r"Traceback \(most recent call last\)|File \"/|validation errors? for |\[type=[a-z_]+, "
    r"|input_value=|errors\.pydantic\.dev|pydantic_core|sqlalchemy|sqlite3\."
)
CODE = re.compile(r"[a-z][a-z0-9_]*")
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    # Every health check (iterating HealthCheck yields its members; hypothesis's enum metaclass
    # leaves that iteration untyped).
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)
# A real project id for some of the cases, so they reach past "unknown project".
PROJECTS = [HELLO, SETTINGS_PROJECT]


@dataclass
class Api:
    server: LiveServer
    operations: list[APIOperation]
    http: requests.Session


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    # Failed credentials are what the unauthenticated half sends by the thousand: the
    # throttle (tested in test_http_edges.py) is set out of the way.
    live = hello_server(
        tmp_path_factory.mktemp("fuzz-api"),
        STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS="1000000",
        STEAMHARNESS_THROTTLE_HOLD_SECONDS="0",
    )
    live.add_project(write_settings_project(live.projects / "settings"), SETTINGS_PROJECT)
    with live.running(), requests.Session() as http:
        import schemathesis
        from schemathesis.core.result import Ok

        schema = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json", timeout=WAIT)
        # The MCP endpoint and its per-method operations (`MCP_PATH#<method>`, pseudo-paths
        # whose fragment only names the method: webui/mcp/openapi.py) are fuzzed over the
        # protocol in test_fuzz_mcp.py, not as URLs.
        operations: list[APIOperation] = []
        for result in schema.get_all_operations():
            # Every operation of the server's own document loads.
            assert isinstance(result, Ok), result.err()
            operation = result.ok()
            if operation.path.startswith("/api/") and operation.path.split("#")[0] != MCP_PATH:
                operations.append(operation)
        yield Api(live, operations, http)
        log = live.log()
    assert "Traceback" not in log, log


def check_answer(operation: APIOperation, response: Any) -> None:
    what = f"{operation.label} -> {response.status_code}: {response.text[:600]!r}"
    assert response.status_code < 500, what
    assert not LEAKS.search(response.text), what
    if response.status_code >= 400:
        content_type = (response.headers.get("content-type") or [""])[0]  # schemathesis: lists
        assert content_type.startswith("application/json"), what
        doc = response.json()
        assert isinstance(doc, dict) and isinstance(doc.get("error"), dict), what
        assert isinstance(doc["error"].get("message"), str) and doc["error"]["message"], what
        assert CODE.fullmatch(str(doc["error"].get("code"))), what


def attack(api: Api, operation: APIOperation, headers: dict[str, str], examples: int) -> None:
    from schemathesis import GenerationMode

    cases = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )

    @settings(FUZZ, max_examples=examples)
    @given(case=cases, project=st.sampled_from([None, *PROJECTS]))
    def one(case: Any, project: str | None) -> None:
        if project is not None and "project_id" in (case.path_parameters or {}):
            case.path_parameters["project_id"] = project
        response = case.call(base_url=api.server.base_url, session=api.http, headers=headers, timeout=WAIT)
        check_answer(operation, response)

    one()


def fuzz(api: Api, headers: dict[str, str], examples: int) -> None:
    assert len(api.operations) >= 10, [op.label for op in api.operations]
    for operation in api.operations:
        attack(api, operation, headers, examples)


def test_the_json_api_answers_any_request_with_the_admin_key_without_a_server_error(api: Api) -> None:
    fuzz(api, {"Authorization": f"Bearer {api.server.admin_key}"}, EXAMPLES)


def test_the_json_api_answers_any_request_without_credentials_without_a_server_error(api: Api) -> None:
    fuzz(api, {}, EXAMPLES_WITHOUT_CREDENTIALS)


# --------------------------------------------------------------------------- what the fuzz found


def test_a_request_of_the_wrong_shape_is_a_422_naming_each_field_without_echoing_it(api: Api) -> None:
    key = {"Authorization": f"Bearer {api.server.admin_key}"}
    secret = "s3cret-" + "x" * 2000
    r = api.http.post(
        f"{api.server.base_url}/api/workflows/{HELLO}/files",
        params={"fileName": "", "mimeType": secret},
        data=b"hello",
        headers={**key, "Content-Type": "application/octet-stream"},
        timeout=WAIT,
    )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"] == {"query.fileName": "String should have at least 1 character"}
    assert error["message"] == "invalid request: query.fileName: String should have at least 1 character"
    assert "detail" not in r.json() and secret not in r.text


def test_a_body_the_framework_cannot_parse_and_an_unknown_route_are_api_errors(api: Api) -> None:
    key = {"Authorization": f"Bearer {api.server.admin_key}"}
    base = api.server.base_url
    parse = api.http.post(
        f"{base}/api/interactions/int_0000000000000000/answer",
        data=b"\xff{",
        headers={**key, "Content-Type": "application/json"},
        timeout=WAIT,
    )
    missing = api.http.get(f"{base}/api/no/such/route", headers=key, timeout=WAIT)
    wrong_method = api.http.put(f"{base}/api/whoami", headers=key, timeout=WAIT)
    for r, status, code in (
        (parse, 400, "bad_json"),  # the one strict JSON reader's refusal (webui/web/json_body.py)
        (missing, 404, "not_found"),
        (wrong_method, 405, "method_not_allowed"),
    ):
        assert r.status_code == status, r.text
        assert r.json()["error"]["code"] == code and r.json()["error"]["message"], r.text
