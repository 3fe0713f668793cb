"""The two shapes of a server file as pydantic models, with the value checks as validators.

An `mcpServers` entry (`Entry`) or a resource's `transport` (`Transport`) is a union
discriminated by its form: command → stdio, url → remote, both or neither → a model that
reports exactly that. Every model forbids unknown fields. A failed check raises a custom
error of type `problem` whose context carries the (sub-path, message) pairs from `values`;
`servers` turns pydantic's errors into the lines people read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, LiteralString, NoReturn, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Strict,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from webui.host.config import values
from webui.host.config.model import ID_RE, normalise_id
from webui.host.config.templates import ValueSpec
from webui.host.config.values import Problems

ENTRY_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http"}
_T = TypeVar("_T")


def _problem(exc: Problems) -> PydanticCustomError:
    """A custom pydantic error carrying every (sub-path, message) pair of `exc`."""
    return PydanticCustomError(
        "problem", "{problem}", {"problem": exc.problems[0][1], "problems": exc.problems}
    )


def _fail(message: str) -> NoReturn:
    raise _problem(Problems.one(message))


def _checked(check: Callable[[Any], _T]) -> Callable[[Any], _T]:
    def run(value: Any) -> _T:
        try:
            return check(value)
        except Problems as exc:
            raise _problem(exc) from None

    return run


def _is_yaml(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("is_yaml"))


def _env(value: Any, info: ValidationInfo) -> tuple[tuple[str, ValueSpec], ...]:
    try:
        return values.values(value, is_yaml=_is_yaml(info), header=False)
    except Problems as exc:
        raise _problem(exc) from None


def _headers(value: Any, info: ValidationInfo) -> tuple[tuple[str, ValueSpec], ...]:
    """Header values; a plain-http (loopback) URL must not carry any."""
    problems: list[tuple[str, str]] = []
    try:
        specs = values.values(value, is_yaml=_is_yaml(info), header=True)
    except Problems as exc:
        problems, specs = exc.problems, exc.accepted or ()
    url = info.data.get("url")
    if specs and isinstance(url, str) and url.lower().startswith("http:"):
        problems.append(("", "plain http (loopback) must not carry headers; use https to send headers"))
    if problems:
        raise _problem(Problems(problems))
    return specs


def _url(value: Any) -> str:
    url = values.literal(value)
    reason = values.url_problem(url)
    if reason:
        raise Problems.one(reason)
    return url


def _one_executable(command: str, args_field: str) -> str:
    if any(c.isspace() for c in command) and "/" not in command:
        _fail("one executable only; put its arguments in " + args_field)
    return command


def _entry_type(form: Literal["stdio", "http"] | None) -> Callable[[Any], str]:
    """mcpServers `type`: a known name, and (once the form is known) one that matches it."""

    def check(declared: Any) -> str:
        if declared == "sse":
            _fail(
                "legacy SSE is not supported; remote servers use Streamable HTTP"
                " (type: http or streamable-http, url of the Streamable HTTP endpoint)"
            )
        if not isinstance(declared, str) or declared not in ENTRY_TYPES:
            _fail(f"must be stdio, http or streamable-http, not {declared!r}")
        actual = ENTRY_TYPES[declared]
        if form == "stdio" and actual == "http":
            _fail("http/streamable-http takes url, not command")
        if form == "http" and actual == "stdio":
            _fail("stdio takes command, not url")
        return actual

    return check


def _equals(expected: str, message: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value != expected:
            _fail(message.format(value=value))
        return value

    return check


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail("must be a non-empty string")
    return value


def _resource_id(value: Any) -> str:
    if not (isinstance(value, str) and ID_RE.match(value)):
        suggestion = normalise_id(value) if isinstance(value, str) and value.isascii() else ""
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        _fail(f"must be a normalised mcp- id: lowercase letters, digits and '-'{hint}")
    return value


_Literal = Annotated[str, PlainValidator(_checked(values.literal))]
_Url = Annotated[str, PlainValidator(_checked(_url))]
_Arguments = Annotated[list[Annotated[str, PlainValidator(_checked(values.argument))]], Strict()]
_EnvValues = Annotated[tuple[tuple[str, ValueSpec], ...], PlainValidator(_env)]
_HeaderValues = Annotated[tuple[tuple[str, ValueSpec], ...], PlainValidator(_headers)]


def _again(error: ErrorDetails) -> InitErrorDetails:
    """An error as pydantic reported it, ready to be raised again beside another."""
    ctx = dict(error.get("ctx") or {})
    ctx.setdefault("problem", error["msg"])
    return InitErrorDetails(
        type=PydanticCustomError(cast(LiteralString, error["type"]), "{problem}", ctx),
        loc=error["loc"],
        input=error["input"],
    )


# ------------------------------------------------------------------------------ models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class _Formless(_Model):
    """Both forms or neither: after the other problems, say which form to choose."""

    @model_validator(mode="wrap")
    @classmethod
    def _one_form(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        errors: list[InitErrorDetails] = []
        try:
            handler(data)
        except ValidationError as exc:
            errors = [_again(error) for error in exc.errors()]
        both = "command" in data and "url" in data
        message = (
            "give either command (stdio) or url (remote), not both"
            if both
            else "missing command (stdio server) or url (remote server)"
        )
        errors.append(InitErrorDetails(type=_problem(Problems([("", message)])), loc=(), input=data))
        raise ValidationError.from_exception_data(cls.__name__, errors)


class StdioEntry(_Model):
    type: Annotated[str | None, PlainValidator(_entry_type("stdio"))] = None
    command: _Literal
    args: _Arguments = Field(default_factory=list[str])
    env: _EnvValues = ()

    @field_validator("command")
    @classmethod
    def _command(cls, command: str) -> str:
        return _one_executable(command, "args")


class HttpEntry(_Model):
    type: Annotated[str | None, PlainValidator(_entry_type("http"))] = None
    url: _Url
    headers: _HeaderValues = ()


class FormlessEntry(_Formless):
    type: Annotated[str | None, PlainValidator(_entry_type(None))] = None
    command: Any = None
    args: Any = None
    env: Any = None
    url: Any = None
    headers: Any = None


class StdioTransport(_Model):
    command: _Literal
    arguments: _Arguments = Field(default_factory=list[str])
    environment: _EnvValues = ()

    @field_validator("command")
    @classmethod
    def _command(cls, command: str) -> str:
        return _one_executable(command, "transport.arguments")


class HttpTransport(_Model):
    url: _Url
    headers: _HeaderValues = ()


class FormlessTransport(_Formless):
    command: Any = None
    arguments: Any = None
    environment: Any = None
    url: Any = None
    headers: Any = None


def _form(value: Any) -> str | None:
    """The union tag: the form follows from command or url; None for a non-object."""
    if not isinstance(value, dict):
        return None
    has_command, has_url = "command" in value, "url" in value
    return "stdio" if has_command and not has_url else "http" if has_url and not has_command else "none"


_BY_FORM = Discriminator(_form, custom_error_type="not_object", custom_error_message="not an object")
Entry = Annotated[
    Annotated[StdioEntry, Tag("stdio")]
    | Annotated[HttpEntry, Tag("http")]
    | Annotated[FormlessEntry, Tag("none")],
    _BY_FORM,
]
Transport = Annotated[
    Annotated[StdioTransport, Tag("stdio")]
    | Annotated[HttpTransport, Tag("http")]
    | Annotated[FormlessTransport, Tag("none")],
    _BY_FORM,
]
ENTRY: TypeAdapter[Entry] = TypeAdapter(Entry)
TRANSPORT: TypeAdapter[Transport] = TypeAdapter(Transport)


class Resource(_Model):
    schema_version: Annotated[
        str, PlainValidator(_equals("1", 'must be the string "1" (quoted), not {value!r}'))
    ]
    kind: Annotated[str, PlainValidator(_equals("mcp_server", "must be mcp_server, not {value!r}"))]
    id: Annotated[str, PlainValidator(_resource_id)]
    name: Annotated[str, PlainValidator(_name)]
    transport: Transport
