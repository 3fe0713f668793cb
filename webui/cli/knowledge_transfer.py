"""`steamharness knowledge export|import` (webui.cli.knowledge): a knowledge base as NDJSON."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from webui import strict_json
from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    echo,
    json_text,
)
from webui.cli.knowledge_common import (
    CollectionOpt,
    ProjectArg,
    Target,
    ValuesDirOpt,
    cli_actor,
    open_target,
)
from webui.errors import ConfigError, KnowledgeFull, KnowledgeRefused

# ----------------------------------------------------------------- export / import


def _audit_alone(target: Target, event: Any, details: dict[str, Any]) -> None:
    target.audit.record_alone(
        target.main,
        event,
        actor="cli",
        project_id=target.project_id,
        target=target.project_id,
        source="cli",
        run_id=None,
        client_address=None,
        user_agent=None,
        details=details,
    )


def knowledge_export(
    project: ProjectArg,
    collection: CollectionOpt = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write to FILE (default stdout).", show_default=False),
    ] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Export as NDJSON: each collection, then each of its documents with its text."""
    from webui.audit.events import AuditName

    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    if collection is not None:
        target.service.collection(target.project_id, collection)  # an unknown one: NotFound
    counts = {"collections": 0, "documents": 0}

    def lines() -> Iterator[str]:
        for line in target.service.export(target.project_id, collection):
            counts["collections" if line["type"] == "collection" else "documents"] += 1
            yield ndjson_line(line)

    if output is None:
        for text in lines():
            echo(text, nl=False)
    else:
        partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
        try:
            with partial.open("w", encoding="utf-8") as fh:
                fh.writelines(lines())
            partial.replace(output)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise ConfigError(f"--output {output}: {exc.strerror or exc}") from None
    _audit_alone(target, AuditName.KNOWLEDGE_EXPORTED, {"collection": collection, **counts})
    if output is not None:
        echo(
            f"exported {counts['collections']} collection(s), {counts['documents']} document(s) to {output}",
            err=True,
        )


def ndjson_line(record: Any) -> str:
    """One record of an export: one line to every reader (`json_text` escapes the line
    separators JSON leaves as they are), safe in a terminal."""
    return json_text(record, indent=None) + "\n"


def _ndjson(text: str, where: str) -> list[Any]:
    """Each line's JSON; a line that is not JSON fails before anything is written."""
    lines = text.rstrip().split("\n") if text.strip() else []
    parsed: list[Any] = []
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if not line.strip():
            raise KnowledgeRefused(f"{where}: line {number}: empty (one JSON object per line)")
        try:
            parsed.append(strict_json.loads(line))
        except json.JSONDecodeError as exc:
            raise KnowledgeRefused(
                f"{where}: line {number}: not JSON ({exc.msg} at column {exc.colno})"
            ) from None
        except ValueError as exc:
            raise KnowledgeRefused(f"{where}: line {number}: not acceptable JSON ({exc})") from None
    return parsed


def knowledge_import(
    project: ProjectArg,
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="An NDJSON export ('-': stdin).")],
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Import an NDJSON export: collections created, documents added or replaced by id.

    Every line must be JSON before anything is written; the import stops at the first line
    it cannot use, naming it (the lines before it stay)."""
    from webui.audit.events import AuditName

    if source == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        try:
            text, where = Path(source).expanduser().read_text(encoding="utf-8"), source
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    lines = _ndjson(text, where)
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    try:
        counts = target.service.import_lines(target.project_id, lines, actor=cli_actor())
    except (KnowledgeRefused, KnowledgeFull) as exc:
        raise KnowledgeRefused(f"{where}: {exc.message}") from None
    _audit_alone(target, AuditName.KNOWLEDGE_IMPORTED, {"lines": len(lines), **counts})
    echo(
        f"imported {where}: {counts['collections']} collection(s) created; documents: "
        f"{counts['added']} added, {counts['replaced']} replaced, {counts['updated']} updated,"
        f" {counts['unchanged']} unchanged"
    )
