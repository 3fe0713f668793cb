"""Reading `package.json` and the field checks every part of it shares.

`package.json` is a normative, externally written format, so loading is strict about the
fields it knows and silent about the ones it does not (the format may be extended). Every
problem becomes one `ProjectError` line that names the file and the field path, because the
person reading it has to fix the file by hand and has nothing else to go on. The params
(`params.py`), the project (`project.py`) and the configuration fields
(`configuration.py`) all build on these helpers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import ArgsKwargs, CoreSchema, ErrorDetails, PydanticCustomError, core_schema

from webui import strict_json
from webui.errors import ProjectError

V = TypeVar("V")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def quote(value: Any) -> str:
    """Short, quoted rendering of a bad value so a huge value cannot flood the error line."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for 'expected X, got Y' messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_number(value: Any) -> bool:
    """JSON numbers only: Python's bool is an int, but `true` is not a number in JSON."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------- model checks
#
# The parts of package.json are pydantic dataclasses (`RelatedRef`, `ConfigField`, `Param`):
# each field's check is an annotation built here that raises `problem(...)`, today's one line,
# and `validated` turns the first error into `<where><field path>: <problem>`. JSON null counts
# as absent everywhere (`validate_default` makes a field's check see its absence too). A field's
# docstring is its description in the package.json reference (`package_schema.py`).

PACKAGE_JSON: Final = ConfigDict(extra="ignore", validate_default=True, use_attribute_docstrings=True)


def described(description: str) -> ConfigDict:
    """`PACKAGE_JSON` for a part whose description in the package.json reference is this."""
    return PACKAGE_JSON | ConfigDict(json_schema_extra={"description": description})


# The default of a required field: its check sees null and absence alike (`is required`).
ABSENT: Final[Any] = None


def json_fields(part: type) -> dict[str, FieldInfo]:
    """A part's fields by the names package.json gives them (the alias, else the name)."""
    fields: dict[str, FieldInfo] = part.__pydantic_fields__
    return {
        info.validation_alias if isinstance(info.validation_alias, str) else name: info
        for name, info in fields.items()
    }


def anchored(regex: re.Pattern[str]) -> str:
    """A regex the checks `fullmatch` with, as the JSON Schema `pattern` that means the same."""
    return f"^(?:{regex.pattern})$"


def problem(message: str, at: str = "", *, parent: bool = False) -> PydanticCustomError:
    """A check's one-line problem; `at`: the path below the checked field it is about (`[2]`);
    `parent`: about the object that holds the field, not the field."""
    return PydanticCustomError("package_json", "{problem}", {"problem": message, "at": at, "parent": parent})


_HERE: Final = "\x00here"


def continued(run: Callable[[str], V]) -> V:
    """A check that writes its own lines after a `where` it is given (`json_schema`'s
    `<where>/type: ...`), run for a field: its lines continue the field's path."""
    try:
        return run(_HERE)
    except ProjectError as exc:
        raise PydanticCustomError(
            "package_json", "{problem}", {"problem": exc.message.removeprefix(_HERE), "continues": True}
        ) from None


def field_path(loc: tuple[str | int, ...]) -> str:
    """`('params', 2, 'type')` as `.params[2].type`."""
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in loc)


def problem_text(error: ErrorDetails, where: str) -> str:
    """One validation error as today's line: `<where><field path>: <problem>`."""
    ctx = error.get("ctx") or {}
    if error["type"] != "package_json":
        return f"{where}{field_path(error['loc'])}: {error['msg']}"
    loc = error["loc"][:-1] if ctx.get("parent") else error["loc"]
    if ctx.get("continues"):
        return f"{where}{field_path(loc)}{ctx['problem']}"
    return f"{where}{field_path(loc)}{ctx.get('at', '')}: {ctx['problem']}"


def validated(adapter: TypeAdapter[V], raw: Any, where: str, context: dict[str, Any] | None = None) -> V:
    """`raw` validated by `adapter`, or its first problem as one `ProjectError` line
    (`where` + the field path, e.g. `<file>: entrypoints[0].params` + `[1].type`)."""
    try:
        return adapter.validate_python(raw, context=context)
    except ValidationError as exc:
        raise ProjectError(problem_text(exc.errors(include_url=False)[0], where)) from None


@dataclasses.dataclass(frozen=True)
class Check:
    """A field's check as an annotation: `test` passes or `message(value)` is the problem;
    absent or null is allowed (the field's default) unless `required` gives what `is required`
    adds, or `null` says null is a value to test (such a field's default is a value). `schema`:
    the field's JSON Schema in the package.json reference (`package_schema`)."""

    test: Callable[[Any], bool]
    message: Callable[[Any], str]
    schema: dict[str, Any] | None = None
    required: str | None = None
    null: bool = False

    def run(self, value: Any) -> Any:
        if value is None and not self.null:
            if self.required is not None:
                raise problem(f"is required {self.required}".rstrip())
            return None
        if not self.test(value):
            raise problem(self.message(value))
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_before_validator_function(self.run, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(self.schema) if self.schema is not None else handler(schema)


def check(
    test: Callable[[Any], bool],
    message: Callable[[Any], str],
    schema: dict[str, Any] | None = None,
    *,
    required: str | None = None,
    null: bool = False,
) -> Check:
    """See `Check`."""
    return Check(test, message, schema, required, null)


def one_of(kind: str, choices: Sequence[str]) -> Check:
    """A value that must be one of `choices`: "unknown {kind} 'x' (expected one of: a, b)"."""
    listed = ", ".join(choices)
    return check(
        lambda v: v in choices,
        lambda v: f"unknown {kind} {quote(v)} (expected one of: {listed})",
        {"enum": list(choices)},
        required=f"(expected one of: {listed})",
    )


def _absent_is(default: Any) -> Callable[[Any], Any]:
    return lambda value: default if value is None else value


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _got(expected: str) -> Callable[[Any], str]:
    return lambda value: f"expected {expected}, got {json_type(value)}"


# An optional string (`description`), and an optional flag (`required`): absent or null is false.
Text = Annotated[str | None, check(_is_str, _got("a string"), {"type": "string"})]
Flag = Annotated[
    bool, check(_is_bool, _got("true or false"), {"type": "boolean"}), BeforeValidator(_absent_is(False))
]


def listed(expected: str, got: Callable[[Any], str] = json_type) -> BeforeValidator:
    """A list field (absent or null: empty), refused as `expected <expected>, got <type>`."""

    def run(value: Any) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):  # a tuple: built in code
            raise problem(f"expected {expected}, got {got(value)}")
        return value

    return BeforeValidator(run)


def a_dict(what: str) -> Any:
    """A part's check before its fields, as its `model_validator`: it is an object
    (`expected <what>, got <type>`)."""

    def run(cls: type, raw: Any) -> Any:
        if not isinstance(raw, dict | ArgsKwargs):
            raise problem(f"expected {what}, got {json_type(raw)}")
        return raw

    return model_validator(mode="before")(classmethod(run))  # pyright: ignore[reportArgumentType]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


def unique_names(what: str) -> AfterValidator:
    """A list whose items' names are unique (`[i].name: duplicate <what> name 'x'`)."""

    def run(items: tuple[_Named, ...]) -> tuple[_Named, ...]:
        seen: set[str] = set()
        for index, item in enumerate(items):
            if item.name in seen:
                raise problem(f"duplicate {what} name {item.name!r}", at=f"[{index}].name")
            seen.add(item.name)
        return items

    return AfterValidator(run)


class NotAProject(ProjectError):
    """The folder is no workflow project at all (missing, no package.json, another
    projectType): nothing of it is ever served, not even its problems."""


def read_package_json(root: Path) -> tuple[Path, dict[str, Any]]:
    """The parsed `package.json` object; a missing file means this is not a workflow project."""
    if not root.exists():
        raise NotAProject(f"{root}: project folder does not exist")
    if not root.is_dir():
        raise NotAProject(f"{root}: not a folder")
    path = root / "package.json"
    if not path.is_file():
        raise NotAProject(
            f"{root}: no package.json — not a workflow project, so it is never exposed over MCP"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProjectError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ProjectError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        data = strict_json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProjectError(
            f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise ProjectError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProjectError(f"{path}: expected a JSON object, got {json_type(data)}")
    return path, data


def parse_id(raw: Any, where: str) -> str:
    """The immutable project UUID, canonical hyphenated form, stored lowercase.

    Only the 8-4-4-4-12 spelling is accepted: the id appears in URLs, server names and
    CLI arguments, and one project must not be reachable under several spellings.
    """
    if raw is None:
        raise ProjectError(f"{where}: id: is required (a UUID)")
    if not isinstance(raw, str) or not UUID_RE.fullmatch(raw):
        raise ProjectError(f"{where}: id: {quote(raw)} is not a UUID")
    return raw.lower()


# --------------------------------------------------------------------------- lines

# A JSON text's tokens that say where a value is: strings (whole, so their brackets are not
# read as structure), the structural characters and line breaks (a valid text has none
# inside a string). Numbers and literals are skipped: no pointer needs their line.
_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\]:,\n]')
# The field path a problem's message starts with, after its file (`entrypoints[0].handler`).
_FIELD_PATH = re.compile(r"[A-Za-z_]\w*(?:\[\d+\]|\.[A-Za-z_]\w*)*")
_STEP = re.compile(r"\[(\d+)\]|\.?([A-Za-z_]\w*)")
Pointer = tuple[str | int, ...]


@dataclass
class _Frame:
    is_object: bool
    expecting_key: bool = True  # an object's next string is a key
    index: int = 0  # an array's next element
    on_path: bool = False  # its current member or element is on the path


def value_lines(text: str, depth: int = 6) -> dict[Pointer, int]:
    """The line (1-based) each member and element up to `depth` levels down starts on: its
    key's for a member, its first token's for an element (a number's or a literal's is not
    known). One linear pass over a text the strict reader took."""
    lines: dict[Pointer, int] = {}
    line = 1
    path: list[str | int] = []
    frames: list[_Frame] = []

    def enter(step: str | int) -> None:
        path.append(step)
        frames[-1].on_path = True
        if len(path) <= depth:
            lines.setdefault(tuple(path), line)

    def leave() -> None:
        if frames and frames[-1].on_path:
            path.pop()
            frames[-1].on_path = False

    def value_starts() -> None:
        if frames and not frames[-1].is_object and not frames[-1].on_path:
            enter(frames[-1].index)

    for token in _TOKENS.finditer(text):
        tok = token.group()
        if tok == "\n":
            line += 1
        elif tok in ("{", "["):
            value_starts()
            frames.append(_Frame(is_object=tok == "{"))
        elif tok in ("}", "]"):
            leave()
            if frames:
                frames.pop()
        elif tok == ",":
            leave()
            if frames:
                frames[-1].expecting_key = True
                frames[-1].index += 1
        elif tok == ":":
            continue
        elif frames and frames[-1].is_object and frames[-1].expecting_key:
            frames[-1].expecting_key = False
            try:
                key = json.loads(tok)
            except ValueError:
                key = tok
            enter(key if isinstance(key, str) else tok)
        else:
            value_starts()
    return lines


def problem_line(message: str, file: str, lines: dict[Pointer, int]) -> int | None:
    """The line of `file` a problem's message (`<file>: <field path>: ...`) is about: the
    deepest part of its field path that `lines` knows."""
    if not message.startswith(f"{file}: "):
        return None
    found = _FIELD_PATH.match(message, len(file) + 2)
    if found is None:
        return None
    pointer: list[str | int] = []
    best = None
    for step in _STEP.finditer(found.group()):
        pointer.append(int(step.group(1)) if step.group(1) is not None else step.group(2))
        best = lines.get(tuple(pointer), best)
    return best
