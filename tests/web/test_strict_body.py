"""Every JSON body a route reads goes through `StrictBody` (webui.web.json_body): read by the
strict reader, validated strictly by the route's model, refused in the API's words, and
described to OpenAPI from the same model. A route that reads a body itself (a file streamed,
NDJSON lines) declares it with `RawBody`, never as JSON. The routes are walked as the app
serves them, each endpoint and dependency followed through the functions of its module."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.params import File, Form
from fastapi.routing import RouteContext, iter_route_contexts
from fastapi.testclient import TestClient
from pydantic import ConfigDict

from webui.app import create_app
from webui.errors import KnowledgeRefused
from webui.mcp.openapi import MCP_PATH
from webui.settings import Settings
from webui.web import json_body
from webui.web.json_body import ApiBody, RawBody, Refuse, StrictBody, StrictBodyReader, body_readers

READS = frozenset({"body", "stream", "json"})  # what reads a request's body itself
# The strict reader's own steps: a route that calls them reads JSON around StrictBody.
JSON_READERS = frozenset({"validated", "json_body", "json_object"})


def app_routes(app: FastAPI) -> list[RouteContext]:
    return [
        ctx
        for ctx in iter_route_contexts(app.routes)
        if isinstance(getattr(ctx, "dependant", None), Dependant)
    ]


@cache
def _module_functions(path: str) -> dict[str, ast.AST]:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    return {
        node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _calls(node: ast.AST) -> Iterator[tuple[str, bool]]:
    """The functions each call in `node` calls by name, and the request's own methods it
    calls (`request.body()`: True)."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            if isinstance(call.func, ast.Name):
                yield call.func.id, False
            elif isinstance(call.func, ast.Attribute):
                owner = call.func.value
                if isinstance(owner, ast.Name) and owner.id == "request":
                    yield call.func.attr, True
                elif call.func.attr in JSON_READERS:  # json_body.validated(...)
                    yield call.func.attr, False


def body_reads(fn: Callable[..., Any]) -> list[str]:
    """Where `fn`, or a function it calls (at any depth: of its module, or of another module
    of webui but the strict reader's own), reads a body itself or through a JSON reader."""
    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str | None, str, dict[str, Any]]] = [
        (inspect.getsourcefile(fn), fn.__name__, fn.__globals__)
    ]
    while todo:
        source, name, names = todo.pop()
        if source is None or (source, name) in seen:
            continue
        seen.add((source, name))
        functions = _module_functions(source)
        if name not in functions:
            continue
        for called, method in _calls(functions[name]):
            if method and called in READS:
                found.append(f"{Path(source).name}:{name}: request.{called}()")
            elif method:
                continue
            elif called in JSON_READERS:
                found.append(f"{Path(source).name}:{name}: {called}()")
            elif called in functions:
                todo.append((source, called, names))
            elif (
                inspect.isfunction(target := names.get(called))
                and target.__module__.startswith("webui.")
                and target.__module__ != json_body.__name__
            ):
                todo.append((inspect.getsourcefile(target), target.__name__, target.__globals__))
    return found


def _functions(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    if inspect.isfunction(dependant.call):
        yield dependant.call
    for dep in dependant.dependencies:
        yield from _functions(dep)


def label(ctx: RouteContext) -> str:
    return f"{sorted(ctx.methods or [])} {ctx.path}"


def offenders(app: FastAPI) -> list[str]:
    """Routes that read a body themselves without declaring it (`RawBody`), or that declare
    a JSON body any other way than `StrictBody`."""
    found = []
    for ctx in app_routes(app):
        readers = body_readers(ctx)
        raw = [r for r in readers if isinstance(r, RawBody)]
        reads = [read for fn in _functions(ctx.dependant) for read in body_reads(fn)]
        if reads and not raw:
            found.append(f"{label(ctx)} reads a body itself: {reads}")
        if any("application/json" in r.media_types for r in raw):
            found.append(f"{label(ctx)} reads JSON as a raw body (use StrictBody)")
        if len(readers) > 1:
            found.append(f"{label(ctx)} declares {len(readers)} bodies")
    return found


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(Settings(data_dir=Path("/nonexistent/strict-body")))  # never started


def test_every_json_body_is_read_through_strict_body(app: FastAPI) -> None:
    assert offenders(app) == []
    strict = {
        label(ctx)
        for ctx in app_routes(app)
        if any(isinstance(r, StrictBodyReader) for r in body_readers(ctx))
    }
    assert len(strict) >= 8, strict  # the answer, 4 configuration writes, 3 knowledge ones


def test_every_json_body_the_openapi_document_describes_is_a_strict_body(app: FastAPI) -> None:
    routes = {(ctx.path_format, m.lower()): ctx for ctx in app_routes(app) for m in ctx.methods or ()}
    described = [
        (path, method)
        for path, item in app.openapi()["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "application/json" in op.get("requestBody", {}).get("content", {})
    ]
    assert len(described) >= 9
    for path, method in described:
        if path.split("#")[0] == MCP_PATH:
            continue  # JSON-RPC, read by the MCP gateway's own strict reader (test_jsonrpc_strict.py)
        readers = body_readers(routes[path, method])
        assert [type(r) for r in readers] == [StrictBodyReader], (method, path)
        schema = app.openapi()["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        model = readers[0].model  # type: ignore[union-attr]
        assert schema == {"$ref": f"#/components/schemas/{model.__name__}"}
        assert app.openapi()["components"]["schemas"][model.__name__] == model.model_json_schema()


def body_params(dependant: Dependant) -> list[Any]:
    """The body parameters FastAPI reads for the route, its dependencies' included."""
    return [*dependant.body_params, *(p for dep in dependant.dependencies for p in body_params(dep))]


def test_no_route_has_a_body_parameter_fastapi_parses_itself(app: FastAPI) -> None:
    """FastAPI would read such a body before the route's caller is known, with the standard
    parser: only forms (the pages') are left to it."""
    parsed = [
        f"{label(ctx)}: {param.name}"
        for ctx in app_routes(app)
        for param in body_params(ctx.dependant)
        if not isinstance(param.field_info, Form | File)
    ]
    assert parsed == []
    assert any(body_params(ctx.dependant) for ctx in app_routes(app))  # forms are seen


# --------------------------------------------------------------------------- the check itself


def test_the_walk_finds_a_route_that_reads_json_itself() -> None:
    probe = FastAPI()

    @probe.post("/by-hand")
    async def by_hand(request: Request) -> Any:
        return await request.json()

    async def helper(request: Request) -> bytes:
        return await request.body()

    @probe.post("/through-a-helper")
    async def through_a_helper(request: Request) -> Any:
        return len(await helper(request))

    @probe.post("/declared-raw")
    async def declared_raw(request: Request, _: Annotated[None, Depends(RawBody(("text/plain",)))]) -> Any:
        return len(await request.body())

    @probe.post("/raw-json")
    async def raw_json(request: Request, _: Annotated[None, Depends(RawBody(("application/json",)))]) -> Any:
        return len(await request.body())

    @probe.post("/strict-reader-by-hand")
    async def strict_reader_by_hand(request: Request) -> Any:
        return json_body.validated(Probe, await request.body())

    found = "\n".join(offenders(probe))
    assert "/by-hand reads a body itself" in found and ".json()" in found
    assert "/through-a-helper reads a body itself" in found and "helper: request.body()" in found
    assert "/declared-raw" not in found
    assert "/raw-json reads JSON as a raw body" in found
    assert "/strict-reader-by-hand reads a body itself" in found


# --------------------------------------------------------------------------- StrictBody


def _probe_check(name: Any) -> None:
    raise KnowledgeRefused(f"bad name {name!r}")


class Probe(ApiBody):
    model_config = ConfigDict(extra="forbid")
    refused = KnowledgeRefused

    name: Annotated[str, Refuse(_probe_check)]
    size: Annotated[int, Refuse("size: expected a whole number", missing="size: how large?")]
    note: str | None = None


@pytest.fixture(scope="module")
def probe() -> Iterator[TestClient]:
    api = FastAPI()

    @api.exception_handler(KnowledgeRefused)
    async def refused(request: Request, exc: KnowledgeRefused) -> Any:
        from fastapi.responses import JSONResponse

        return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status)

    @api.post("/probe")
    async def take(body: StrictBody[Probe]) -> Any:
        return body.model_dump()

    with TestClient(api) as client:
        yield client


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"name": "a", "size": 1, "x": 1}', "unknown member 'x' (known: name, note, size)"),
        (b'{"size": "1", "name": 2, "x": 1}', "unknown member 'x' (known: name, note, size)"),  # named first
        (b'{"name": 7, "size": 1}', "bad name 7"),  # the domain's own check, with the value sent
        (b'{"size": 1}', "bad name None"),
        (b'{"name": "a"}', "size: how large?"),
        (b'{"name": "a", "size": "1"}', "size: expected a whole number"),  # strict: no coercion
        (b'{"name": "a", "size": true}', "size: expected a whole number"),
        (b'{"name": "a", "size": 1, "note": 5}', "note: Input should be a valid string"),
        (b"[1]", "the request body must be a JSON object"),
        (
            b'{"name": "a", "name": "b", "size": 1}',
            "the request body is not valid JSON: duplicate key 'name'",
        ),
        (b"", "the request body is empty; send a JSON document"),
    ],
)
def test_a_strict_body_is_refused_in_the_routes_words(probe: TestClient, body: bytes, message: str) -> None:
    r = probe.post("/probe", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"code": "invalid_knowledge", "message": message}
    assert "pydantic" not in r.text and "input_value" not in r.text


def test_a_strict_body_that_fits_is_the_model(probe: TestClient) -> None:
    r = probe.post("/probe", json={"name": "a", "size": 3})
    assert r.status_code == 200 and r.json() == {"name": "a", "size": 3, "note": None}
