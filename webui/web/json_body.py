"""Reading JSON from a request: the one way routes parse a JSON body or an uploaded JSON
document, through the strict reader (`webui.strict_json`: duplicate keys, NaN, depth and
length refused). Bodies are already capped by the guard (`STEAMHARNESS_MAX_BODY_BYTES`; a
knowledge document's, `STEAMHARNESS_MAX_FILE_BYTES` and 1 MiB); one longer than
`webui.parse_threads.INLINE_BYTES` is parsed in a parse thread, off the event loop. A
route whose documents are small by nature passes lower limits on values (`Limits`: a
knowledge document's body, `webui.knowledge.model.MAX_JSON_VALUES`), which bound how long its
parse holds the GIL.

`tests/security/test_json_depth.py` fails when a route under `webui/web` reads JSON
another way (`request.json()`, `json.loads`, a pydantic body parameter FastAPI parses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


async def json_body(
    request: Request,
    *,
    what: str = "the request body",
    error: type[SteamharnessError] = BadJSON,
    limits: Limits = DEFAULT_LIMITS,
) -> Any:
    """The request's body as JSON (see `parse_json`), parsed off the event loop when large."""
    raw = await request.body()
    return await run_parse(len(raw), parse_json, raw, what=what, error=error, limits=limits)


async def json_object(
    request: Request,
    *,
    what: str = "the request body",
    error: type[SteamharnessError] = BadJSON,
    limits: Limits = DEFAULT_LIMITS,
) -> dict[str, Any]:
    doc = await json_body(request, what=what, error=error, limits=limits)
    if not isinstance(doc, dict):
        raise error(f"{what} must be a JSON object")
    return doc
