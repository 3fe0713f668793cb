"""Run outcome -> CallToolResult. The same object goes into text
content (as JSON) and structuredContent; never the report, stdout, stderr or secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types

from webui.files.download import download_path
from webui.store.models import Interaction
from webui.workflows.project import Entrypoint


def tool_result(payload: dict[str, Any], *, is_error: bool, text: str | None = None) -> types.CallToolResult:
    """Raises ValueError rather than put NaN or Infinity (not JSON) into the text. `text`:
    the text content instead of the payload as JSON (an entrypoint's `"resultText": "output"`)."""
    if text is None:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=is_error,
    )


def _base(run_id: str | None, ep: Entrypoint, status: str) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    if run_id is not None:
        payload["runId"] = run_id
    payload.update({"status": status, "entrypointId": ep.id, "entrypointTitle": ep.title})
    return payload


def file_references(files: list[dict[str, Any]], *, local: bool) -> list[dict[str, Any]]:
    """The files a run created, as its result names them: id, name, mimeType, size, and
    where the client shares this machine (stdio), the stored file's path and file: URI."""
    refs: list[dict[str, Any]] = []
    for view in files:
        ref = {k: view[k] for k in ("id", "name", "mimeType", "size") if k in view}
        if local and view.get("path"):
            path = Path(str(view["path"]))
            ref.update(path=str(path), uri=path.as_uri())
        refs.append(ref)
    return refs


def file_links(run_id: str, files: list[dict[str, Any]], base_url: str) -> list[types.ResourceLink]:
    """One `resource_link` per file the run created: its download URL on this server, which
    the client fetches with the same Authorization header (`webui.files.download`)."""
    base = base_url.rstrip("/")
    return [
        types.ResourceLink(
            type="resource_link",
            uri=base + download_path(run_id, str(view["id"])),
            name=str(view["name"]),
            mime_type=str(view["mimeType"]) if view.get("mimeType") else None,
            size=view["size"] if isinstance(view.get("size"), int) else None,
            description="A file the run created: GET it with the same Authorization header.",
        )
        for view in files
        if view.get("id") and view.get("name")
    ]


def final_result(
    run_id: str,
    ep: Entrypoint,
    status: str,
    output: Any,
    error: dict[str, Any] | None,
    *,
    files: list[dict[str, Any]] | None = None,
    local: bool = False,
    download_base: str | None = None,
) -> types.CallToolResult:
    """`download_base`: the server's address as the client reached it (HTTP); each created
    file then also comes as a `resource_link` to its download URL (`file_links`)."""
    payload = _base(run_id, ep, status)
    if files:
        payload["files"] = file_references(files, local=local)
    links = file_links(run_id, files or [], download_base) if download_base else []
    if status == "success":
        payload["output"] = output
        text = output if ep.result_text == "output" and isinstance(output, str) else None
        try:
            result = tool_result(payload, is_error=False, text=text)
            result.content.extend(links)
            return result
        except ValueError:  # workers refuse such output; this guards runs recorded otherwise
            message = "The run's output contains NaN or Infinity, which JSON cannot carry."
            return error_result(run_id, ep, "failed", "handler_error", message)
    err = dict(error or {"code": "internal", "message": "The run failed."})
    clean: dict[str, Any] = {"code": str(err.get("code", "internal"))}
    if "errCode" in err:
        clean["errCode"] = err["errCode"]
    clean["message"] = str(err.get("message", ""))
    payload["error"] = clean
    result = tool_result(payload, is_error=True)
    result.content.extend(links)
    return result


def error_result(
    run_id: str | None,
    ep: Entrypoint,
    status: str,
    code: str,
    message: str,
    *,
    fields: dict[str, str] | None = None,
) -> types.CallToolResult:
    """`fields`: the problem of each named field (an invalid configuration)."""
    payload = _base(run_id, ep, status)
    error: dict[str, Any] = {"code": code, "message": message}
    if fields is not None:
        error["fields"] = fields
    payload["error"] = error
    return tool_result(payload, is_error=True)


# What the model reads of arguments that failed: the problems (each already clipped, at most
# a few of them), and never more than this, whatever the arguments held.
MAX_ARGUMENT_MESSAGE = 2000


def argument_error_result(ep: Entrypoint, code: str, message: str) -> types.CallToolResult:
    """Arguments that failed the tool's input schema or a file param's checks: a tool error
    (SEP-1303: the model reads which argument and what was wrong, and calls again), no run.
    `code`: `invalid_params`, or a file's own (`file_too_large`, `invalid_mime_type`,
    `project_quota`)."""
    if len(message) > MAX_ARGUMENT_MESSAGE:
        message = message[: MAX_ARGUMENT_MESSAGE - 3] + "..."
    return error_result(None, ep, "failed", code, message)


def interaction_required_result(
    run_id: str, ep: Entrypoint, interaction: Interaction, *, reason: str, answer_hint: str | None
) -> types.CallToolResult:
    payload = _base(run_id, ep, "waiting_for_input")
    where = answer_hint or "The run keeps waiting; answer it from a client that supports form elicitation."
    payload["error"] = {
        "code": "interaction_required",
        "message": f"The run is waiting for input this client cannot provide here ({reason}). {where}",
        "interactionId": interaction.id,
        "title": interaction.title,
        "fields": interaction.fields,
    }
    return tool_result(payload, is_error=True)
