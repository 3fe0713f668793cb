"""An entrypoint of a workflow project: one `entrypoints[]` item of `package.json`, which
becomes one MCP tool. Read as a pydantic dataclass whose fields carry their checks (today's
one-line problems, `package_json.py`) and their description in the package.json reference.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any, Final, cast

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs

from webui.workflows.json_schema import check_input_schema
from webui.workflows.package_json import (
    ABSENT,
    Check,
    Text,
    anchored,
    check,
    continued,
    described,
    is_number,
    json_type,
    problem,
    quote,
    validated,
)
from webui.workflows.params import Params

ENTRYPOINT_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
TASK_MODES: Final = ("never", "optional", "required")
TASK_DEFAULT: Final = "optional"
RESULT_TEXTS: Final = ("json", "output")
# The client capabilities an entrypoint may require (`"requires"`): a call from a client that
# did not declare one of them is refused before any run (webui.mcp.capabilities).
CLIENT_CAPABILITIES: Final = ("sampling", "elicitation", "roots")


def _requires(raw: Any) -> Any:
    """`"requires"`: a list of distinct client capability names (absent or null: none)."""
    if raw is None or isinstance(raw, tuple):
        return raw or ()
    allowed = ", ".join(f'"{name}"' for name in CLIENT_CAPABILITIES)
    if not isinstance(raw, list):
        raise problem(f"expected a list of client capabilities ({allowed}), got {json_type(raw)}")
    names: list[str] = []
    for index, name in enumerate(cast(list[Any], raw)):
        if not isinstance(name, str) or name not in CLIENT_CAPABILITIES:
            raise problem(
                f"unknown client capability {quote(name)} (expected one of {allowed})", at=f"[{index}]"
            )
        if name in names:
            raise problem(f"{quote(name)} is listed twice", at=f"[{index}]")
        names.append(name)
    return tuple(names)


def _entrypoint_id_ok(value: Any) -> bool:
    return isinstance(value, str) and ENTRYPOINT_ID_RE.fullmatch(value) is not None


def _one_of(*allowed: str) -> Check:
    """`"knowledge"`, `"task"`, `"resultText"`: one of `allowed` (here JSON null is no absence)."""
    shown = ", ".join(f'"{a}"' for a in allowed[:-1]) + f' or "{allowed[-1]}"'
    return check(
        lambda v: v in allowed,
        lambda v: f"expected {shown}, got {quote(v)}",
        {"enum": list(allowed)},
        null=True,
    )


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _positive_seconds(value: Any) -> bool:
    return is_number(value) and value > 0


# The Python names of the fields package.json spells otherwise: never read from the file.
_NOT_JSON_NAMES: Final = frozenset({"timeout_seconds", "result_text", "input_schema"})


@dataclass(
    frozen=True,
    config=described("One callable workflow: it becomes one MCP tool named `id`.")
    | ConfigDict(validate_by_name=True),
)
class Entrypoint:
    """One callable workflow entry; becomes one MCP tool named `id`. Read from package.json
    with the project folder as context (`{"root": folder}`): the handler's file is checked
    there; built in code (no context), the handler and params are taken as they are."""

    id: Annotated[
        str,
        check(
            _entrypoint_id_ok,
            lambda v: (
                f"invalid entrypoint id {quote(v)} (it is the MCP tool name: 1-64 of A-Z a-z 0-9 _ . -)"
            ),
            {"type": "string", "pattern": anchored(ENTRYPOINT_ID_RE)},
            required="",
        ),
    ] = ABSENT
    """The MCP tool name: 1-64 of `A-Z a-z 0-9 _ . -`, unique in the project."""
    title: Text = None
    """Shown to people (default: the id)."""
    description: Text = None
    """The tool's description (default: the title)."""
    handler: Annotated[
        str,
        check(  # the file and function are checked in the project folder: `parse_handler`
            _is_str,
            lambda v: "",
            {"type": "string", "pattern": r"^[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*$"},
            required='("file.py:function")',
        ),
    ] = ABSENT
    """`file.py:function`, the file relative to the project and inside it; the function takes `ctx`."""
    timeout_seconds: Annotated[
        int | float | None,  # int stays int, so the structure report echoes what the author wrote
        check(
            _positive_seconds,
            lambda v: f"expected a positive number of seconds, got {quote(v)}",
            {"type": "number", "exclusiveMinimum": 0},
        ),
        Field(validation_alias="timeoutSeconds"),
    ] = None
    """The run is stopped (SIGTERM, then SIGKILL) past it; time waiting for a person or a child run does
    not count."""
    params: Params = ()
    """The tool's inputs."""
    # Kept as the JSON text tools/list serves (checked at load: `json_schema.check_input_schema`).
    input_schema: Annotated[
        str | None,
        WithJsonSchema({"type": "object"}),
        Field(validation_alias="inputSchema"),
    ] = None
    """Instead of `params`: the tool's own JSON Schema 2020-12, served as written (`type: object`; at most
    64 KiB, 32 levels; `$ref` only inside it; no risky patterns)."""
    knowledge: Annotated[str, _one_of("read", "write")] = "read"
    """`write`: the handler may add and remove knowledge-base documents (`ctx.knowledge.add/remove`;
    default `read`)."""
    task: Annotated[str, _one_of(*TASK_MODES)] = TASK_DEFAULT
    """Whether a call may become an MCP task (default `optional`): `never`, `optional` (when the run
    does not end quickly), `required` (only clients declaring the tasks extension may call it)."""
    result_text: Annotated[
        str,
        _one_of(*RESULT_TEXTS),
        Field(validation_alias="resultText"),
    ] = "json"
    """The result's text content: the payload as JSON (default), or a string output itself."""
    requires: Annotated[
        tuple[str, ...],
        BeforeValidator(_requires),
        WithJsonSchema({"type": "array", "items": {"enum": list(CLIENT_CAPABILITIES)}, "uniqueItems": True}),
    ] = ()
    """Client capabilities a caller must declare (each once); others are refused before any run."""

    @model_validator(mode="before")
    @classmethod
    def _object(cls, raw: Any) -> Any:
        if isinstance(raw, ArgsKwargs):
            return raw
        if not isinstance(raw, dict):
            raise problem(f"expected an entrypoint object, got {json_type(raw)}")
        return {k: v for k, v in cast(dict[str, Any], raw).items() if k not in _NOT_JSON_NAMES}

    @field_validator("title", "description")
    @classmethod
    def _fallback(cls, text: str | None, info: ValidationInfo) -> str | None:
        return text or info.data.get("id" if info.field_name == "title" else "title")

    @field_validator("handler", mode="before")
    @classmethod
    def _handler(cls, raw: Any, info: ValidationInfo) -> Any:
        return raw if info.context is None else parse_handler(raw, info.context["root"])

    @field_validator("input_schema", mode="before")
    @classmethod
    def _input_schema(cls, raw: Any, info: ValidationInfo) -> Any:
        if info.context is None or raw is None:
            return raw
        if info.data.get("params"):
            raise problem("give params or inputSchema, not both", parent=True)
        return continued(lambda where: check_input_schema(raw, where))

    @property
    def knowledge_write(self) -> bool:
        return self.knowledge == "write"

    @property
    def handler_file(self) -> str:
        """The handler's file, relative to the project root."""
        return self.handler.rpartition(":")[0]

    @property
    def handler_function(self) -> str:
        """The handler's function name inside `handler_file`."""
        return self.handler.rpartition(":")[2]


_ENTRYPOINT: Final = TypeAdapter(Entrypoint)


def parse_entrypoint(raw: Any, root: Path, where: str) -> Entrypoint:
    """One `entrypoints[]` item of the project in `root` (`where`: `<file>: entrypoints[i]`)."""
    return validated(_ENTRYPOINT, raw, where, {"root": root, "headers": True})


def parse_handler(raw: Any, root: Path) -> str:
    """`"relative/file.py:function"`, confined to the project folder.

    The worker imports this file with the project as working directory, so a path that
    escapes the folder (absolute, `..`, symlink out) would run code the project does not own.
    """
    if raw is None:
        raise problem('is required ("file.py:function")')
    if not isinstance(raw, str):
        raise problem(f'expected a string "file.py:function", got {json_type(raw)}')
    file_part, sep, function = raw.rpartition(":")
    if not sep or not file_part:
        raise problem(f'{quote(raw)} is not of the form "file.py:function"')
    if not function.isidentifier() or keyword.iskeyword(function):
        raise problem(f"{quote(function)} is not a valid Python function name")
    if (
        PurePosixPath(file_part).is_absolute()
        or PureWindowsPath(file_part).is_absolute()
        or (file_part.startswith("\\"))
    ):
        raise problem(f"handler file {quote(file_part)} must be relative to the project")
    if ".." in PurePosixPath(file_part.replace("\\", "/")).parts:
        raise problem(f"handler file {quote(file_part)} must stay inside the project (no '..')")
    if not file_part.endswith(".py"):
        raise problem(f"handler file {quote(file_part)} must be a .py file")
    path = (root / file_part).resolve()
    if not path.is_relative_to(root):
        raise problem(f"handler file {quote(file_part)} resolves outside the project")
    if not path.is_file():
        raise problem(f"handler file {quote(file_part)} does not exist in {root}")
    return raw
