"""Reading JSON from a request: the one way routes parse a JSON body or an uploaded JSON
document, through the strict reader (`webui.strict_json`: duplicate keys, NaN, depth and
length refused). Bodies are already capped by the guard (`STEAMHARNESS_MAX_BODY_BYTES`; a
knowledge document's, `STEAMHARNESS_MAX_FILE_BYTES` and 1 MiB); one longer than
`webui.parse_threads.INLINE_BYTES` is parsed in a parse thread, off the event loop. A
route whose documents are small by nature passes lower limits on values (`Limits`: a
knowledge document's body, `webui.knowledge.model.MAX_JSON_VALUES`), which bound how long its
parse holds the GIL.

A JSON API route takes its body as `body: StrictBody[Model]`, `Model` an `ApiBody`: the body
read by the strict reader, then `Model.model_validate(doc, strict=True)` (in the same parse
thread when large), a refusal worded in one place (`refusal`): a field's `Refuse` marker says
it in today's words (or calls the domain's own check, which raises its error), an unknown
member of a model that forbids them is named with the known ones, anything else is
`<field>: <what is wrong>` without pydantic's internals. The OpenAPI document describes each
body from its model (`add_body_schemas`), and a body the route reads itself from its
declaration (`RawBody`), so what is documented is what is read.

`tests/security/test_json_depth.py` fails when a route under `webui/web` reads JSON
another way (`request.json()`, `json.loads`, a pydantic body parameter FastAPI parses);
`tests/web/test_strict_body.py` when a route reads a JSON body but through `StrictBody`.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

from fastapi import Depends, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import RouteContext, iter_route_contexts
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from starlette.requests import Request

from webui import strict_json
from webui.errors import BadJSON, SteamharnessError
from webui.parse_threads import run_parse


@dataclass(frozen=True)
class Limits:
    """The strict reader's limits on values and on arrays and objects for one kind of body."""

    values: int = strict_json.MAX_VALUES
    containers: int = strict_json.MAX_CONTAINERS


DEFAULT_LIMITS = Limits()


def parse_json(
    raw: bytes | str,
    *,
    what: str = "the request body",
    error: type[SteamharnessError] = BadJSON,
    limits: Limits = DEFAULT_LIMITS,
) -> Any:
    """`raw` as JSON, or `error` (400) saying what is wrong with `what` in one phrase."""
    if not raw.strip():
        raise error(f"{what} is empty; send a JSON document")
    try:
        return strict_json.loads(raw, max_values=limits.values, max_containers=limits.containers)
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text") from None
    except ValueError as exc:
        raise error(f"{what} is not valid JSON: {exc}") from None


# --------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Refuse:
    """How a body field's refusal is worded (as `Annotated` metadata on the field): `says`, a
    sentence raised as the body's `invalid` error, or the domain's own check called with the
    value sent (None when missing), which raises its error; `missing`, when it is absent."""

    says: str | Callable[[Any], object]
    missing: str | None = None


class ApiBody(BaseModel):
    """A JSON API request body. Its class says how the route refuses one: `refused`, a body
    that is no JSON object (or no JSON); `invalid`, one of the wrong shape (`prefix` before
    the problems pydantic found); `limits`, the strict reader's; `forms`, other media types
    the route reads itself (the dependency gives None for them), with the model that
    documents each."""

    refused: ClassVar[type[SteamharnessError]] = BadJSON
    invalid: ClassVar[type[SteamharnessError] | None] = None  # None: `refused`
    prefix: ClassVar[str] = ""
    limits: ClassVar[Limits] = DEFAULT_LIMITS
    forms: ClassVar[Mapping[str, type[BaseModel]]] = MappingProxyType({})


B = TypeVar("B", bound=ApiBody)


def _aliases(model: type[ApiBody]) -> dict[str, str]:
    """The field each member of the JSON names."""
    return {(info.alias or name): name for name, info in model.model_fields.items()}


def refusal(model: type[ApiBody], doc: dict[str, Any], exc: ValidationError) -> SteamharnessError:
    """The one place pydantic's errors become the API's: what is wrong with `doc`, in the
    words the route used before its body had a model."""
    error = model.invalid or model.refused
    problems = exc.errors(include_url=False, include_input=False)
    extra = [e for e in problems if e["type"] == "extra_forbidden"]
    if extra:  # named first, before the value of any member is looked at
        known = ", ".join(sorted(_aliases(model)))
        return error(f"unknown member {str(extra[0]['loc'][0])!r} (known: {known})")
    first = problems[0]
    member = str(first["loc"][0]) if first["loc"] else ""
    field = _aliases(model).get(member)
    marks = [m for m in model.model_fields[field].metadata if isinstance(m, Refuse)] if field else []
    if marks:
        mark = marks[0]
        if first["type"] == "missing" and mark.missing is not None:
            return error(mark.missing)
        if isinstance(mark.says, str):
            return error(mark.says)
        try:
            mark.says(doc.get(member))
        except SteamharnessError as refused:
            return refused
    return error(model.prefix + "; ".join(_said(e) for e in problems))


def _said(e: ErrorDetails) -> str:
    return f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}"


def validated(model: type[B], raw: bytes) -> B:
    """The body parsed by the strict reader and validated strictly, or the route's refusal."""
    doc = parse_json(raw, error=model.refused, limits=model.limits)
    if not isinstance(doc, dict):
        raise model.refused("the request body must be a JSON object")
    try:
        return model.model_validate(doc, strict=True)
    except ValidationError as exc:
        raise refusal(model, doc, exc) from None


class StrictBodyReader:
    """The dependency behind `StrictBody[Model]`: the request's body as `Model`."""

    def __init__(self, model: type[ApiBody]) -> None:
        self.model = model

    async def __call__(self, request: Request) -> ApiBody | None:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media in self.model.forms:
            return None  # the route reads this kind itself
        raw = await request.body()
        return await run_parse(len(raw), validated, self.model, raw)


def _body_model(annotation: Any) -> tuple[type[ApiBody], bool]:
    """The model of `StrictBody[Model]` or `StrictBody[Model | None]`, and whether it is optional."""
    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else ()
    )
    optional = type(None) in args
    model = next((a for a in args if a is not type(None)), annotation)
    if not (isinstance(model, type) and issubclass(model, ApiBody)):
        raise TypeError(f"StrictBody[...] takes an ApiBody model, not {annotation!r}")
    if optional != bool(model.forms):
        raise TypeError(f"StrictBody[{model.__name__}]: optional exactly when the model has forms")
    return model, optional


if TYPE_CHECKING:
    M = TypeVar("M")
    StrictBody = Annotated[M, "the request body, read strictly"]
else:

    class StrictBody:
        """`body: StrictBody[Model]`: the request's JSON body as `Model` (`ApiBody`), read
        after the route's earlier parameters (who asks) were resolved. `StrictBody[Model |
        None]` when the model names `forms` the route reads itself."""

        def __class_getitem__(cls, annotation: Any) -> Any:
            model, _ = _body_model(annotation)
            return Annotated[annotation, Depends(StrictBodyReader(model))]


@dataclass(frozen=True)
class RawBody:
    """A body the route reads itself (bytes streamed, NDJSON lines), declared as a dependency
    (`Annotated[None, Depends(RawBody(...))]`) so the OpenAPI document describes it: a string
    in each of `media_types` (`binary`: raw bytes)."""

    media_types: tuple[str, ...]
    binary: bool = False

    def __call__(self) -> None:
        return None


# --------------------------------------------------------------------------- OpenAPI


def _readers(dependant: Dependant) -> list[StrictBodyReader | RawBody]:
    found: list[StrictBodyReader | RawBody] = []
    for dep in dependant.dependencies:
        if isinstance(dep.call, StrictBodyReader | RawBody):
            found.append(dep.call)
        found += _readers(dep)
    return found


def body_readers(route: RouteContext) -> list[StrictBodyReader | RawBody]:
    """The body declarations among the route's dependencies (at any depth)."""
    dependant = getattr(route, "dependant", None)
    return _readers(dependant) if isinstance(dependant, Dependant) else []


def _component(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def request_body(reader: StrictBodyReader | RawBody, components: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI `requestBody` of one declaration (models added to `components`)."""
    if isinstance(reader, RawBody):
        schema = {"type": "string", "format": "binary"} if reader.binary else {"type": "string"}
        return {"required": True, "content": {m: {"schema": dict(schema)} for m in reader.media_types}}
    content = {"application/json": {"schema": _component(reader.model, components)}}
    for media, form in reader.model.forms.items():
        content[media] = {"schema": _component(form, components)}
    return {"required": True, "content": content}


def add_body_schemas(app: FastAPI) -> None:
    """`/openapi.json` with each route's body described from what it declares."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for route in iter_route_contexts(app.routes):
            readers = body_readers(route)
            for method in (route.methods or set()) if readers else ():
                operation = schema["paths"].get(route.path_format or "", {}).get(method.lower())
                if operation is not None:
                    operation["requestBody"] = request_body(readers[0], components)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
