"""`steamharness knowledge …`: a project's knowledge base from the command line.

PROJECT is a project folder (the knowledge base `steamharness mcp` serves it with: the data
dir's persistent-value store, under the id in its package.json) or a registered project's
id (the server's). The knowledge base lives in the persistent-value store: the data dir's
database, or `values.sqlite3` in `--persistent-value-store-dir` when given. Every write is
audited (source `cli`); errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from webui import strict_json
from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    cli_audit,
    echo,
    highlighted,
    json_text,
    load_settings,
    open_store,
    server_settings,
    terminal_safe,
)
from webui.cli.configs import UUID_RE
from webui.errors import ConfigError, KnowledgeFull, KnowledgeRefused, NotFound

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.audit.log import AuditLog
    from webui.knowledge.model import Actor
    from webui.knowledge.service import KnowledgeService

app = typer.Typer(
    help="A project's knowledge base (on a project folder or a server project id).",
    no_args_is_help=True,
)

ERROR: Final = "steamharness: error: "
BOLD: Final = ("\x1b[1m", "\x1b[0m")
BRACKETS: Final = ("[[", "]]")

ProjectArg = Annotated[
    str,
    typer.Argument(
        metavar="PROJECT",
        help="A project folder (its local knowledge base) or a registered project's id (the server's).",
        show_default=False,
    ),
]
CollectionArg = Annotated[
    str, typer.Argument(metavar="COLLECTION", help="Collection name.", show_default=False)
]
CollectionOpt = Annotated[
    str | None, typer.Option("--collection", help="Only this collection.", show_default=False)
]
FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter",
        metavar="JSON",
        help='Metadata filter: {"key": value} or {"key": [value, ...]}; every key must match.',
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the service's JSON instead of text.")]
ValuesDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--persistent-value-store-dir",
        help="Keep the knowledge base in values.sqlite3 in this folder (as `mcp` does)."
        r" \[env var: STEAMHARNESS_PERSISTENT_VALUE_STORE_DIR]",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Target:
    """The service and the project a command works on; `main`: the main store (audit)."""

    service: KnowledgeService
    project_id: str
    main: Engine
    audit: AuditLog


def _target(project: str, data_dir: Path | None, database_url: str | None, values_dir: Path | None) -> Target:
    from webui.services import knowledge_service
    from webui.store.db import make_engine, private_dir, sqlite_url
    from webui.workflows.package_json import parse_id, read_package_json

    options: dict[str, object] = {"persistent_value_store_dir": values_dir}
    folder = Path(project).expanduser()
    if folder.exists():
        path, package = read_package_json(folder.resolve())
        project_id = parse_id(package.get("id"), str(path))
        settings = load_settings(
            {"data_dir": data_dir, "database_url": database_url, **options}, admin_key=False
        )
        settings = settings.model_copy(update={"data_dir": settings.data_dir.expanduser().resolve()})
        private_dir(settings.data_dir)
        main = make_engine(settings.resolved_database_url, busy_timeout=settings.db_busy_timeout_seconds)
    elif UUID_RE.fullmatch(project):
        settings = server_settings(data_dir, database_url, **options)
        main, registry = open_store(settings)
        project_id = project.lower()
        registry.record(project_id)  # a project that is not registered: NotFound
    else:
        raise ConfigError(
            f"PROJECT {project!r} is neither an existing project folder nor a project id (a UUID)"
        )
    engine = main
    if settings.persistent_value_store_dir is not None:
        where = settings.persistent_value_store_dir.expanduser().resolve()
        engine = make_engine(
            sqlite_url(where / "values.sqlite3"), busy_timeout=settings.db_busy_timeout_seconds
        )
    audit = cli_audit()
    return Target(knowledge_service(settings, engine, main, audit), project_id, main, audit)


def _actor() -> Actor:
    from webui.knowledge.model import Actor

    return Actor(actor="cli", source="cli")


def _json_option(option: str, raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return strict_json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KnowledgeRefused(f"{option}: not JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # a duplicate key, NaN, nested too deep
        raise KnowledgeRefused(f"{option}: not acceptable JSON ({exc})") from None


def _filter(raw: str | None) -> Any:
    value = _json_option("--filter", raw)
    if value is not None and not isinstance(value, dict):
        raise KnowledgeRefused('--filter: a filter is a JSON object: {"key": value} or {"key": [value, ...]}')
    return value


def _print_json(data: Any) -> None:
    echo(json_text(data))


def _error_line(message: str) -> None:
    echo(f"{ERROR}{' '.join(message.split())}", err=True)


# ----------------------------------------------------------------- collections


@app.command("collections")
def knowledge_collections(
    project: ProjectArg,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """List the collections: documents, chunks, bytes of text and language of each."""
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    views = target.service.collections(target.project_id)
    if as_json:
        _print_json(views)
        return
    if not views:
        echo("no collections", err=True)
        return
    rows = [("COLLECTION", "DOCUMENTS", "CHUNKS", "BYTES", "LANGUAGE")]
    rows += [
        (v["name"], str(v["documents"]), str(v["chunks"]), str(v["bytes"]), v["language"]) for v in views
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for name, docs, chunks, size, language in rows:
        counts = f"{docs:>{widths[1]}}  {chunks:>{widths[2]}}  {size:>{widths[3]}}"
        echo(f"{name:<{widths[0]}}  {counts}  {language}")


@app.command("create")
def knowledge_create(
    project: ProjectArg,
    collection: CollectionArg,
    language: Annotated[
        str | None,
        typer.Option(
            "--language", help="Snowball stemming language, or none (default english).", show_default=False
        ),
    ] = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Create a collection (one that exists with the same language is left as it is)."""
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    view = target.service.create_collection(target.project_id, collection, language=language, actor=_actor())
    if view["created"]:
        echo(f"created collection {view['name']} (language {view['language']})")
    else:
        echo(
            f"collection {view['name']} exists already (language {view['language']},"
            f" {view['documents']} document(s))"
        )


# ----------------------------------------------------------------- add


@dataclass(frozen=True)
class Source:
    """One thing to add: a file (`path`) or stdin (`path` None); `shown` names it."""

    shown: str
    path: Path | None

    @property
    def label(self) -> str:
        """How an error names it."""
        return "stdin" if self.path is None else self.shown


def _known(name: str) -> bool:
    from webui.knowledge.extract import kind_of

    try:
        kind_of(name)
    except KnowledgeRefused:
        return False
    return True


def _sources(items: list[str]) -> list[Source]:
    """The files to add, in order: a folder gives every file of a known kind directly in it
    (hidden ones left out), sorted by name. Fails before anything is written."""
    from webui.knowledge.extract import KINDS

    found: list[Source] = []
    for item in items:
        if item == "-":
            if any(s.path is None for s in found):
                raise ConfigError("'-' (text from stdin) may be given once")
            found.append(Source("-", None))
            continue
        path = Path(item).expanduser()
        if path.is_dir():
            try:
                names = sorted(
                    p.name
                    for p in path.iterdir()
                    if not p.name.startswith(".") and p.is_file() and _known(p.name)
                )
            except OSError as exc:
                raise ConfigError(f"{item}: cannot list the folder ({exc.strerror or exc})") from None
            if not names:
                kinds = ", ".join(sorted(KINDS))
                raise ConfigError(f"{item}: the folder holds no file of a known kind ({kinds})")
            found += [Source(str(Path(item) / name), path / name) for name in names]
        elif path.exists():
            found.append(Source(item, path))
        else:
            raise ConfigError(f"{item}: no such file or folder")
    return found


def _add_one(
    target: Target, collection: str, source: Source, *, doc_id: str | None, title: str | None, metadata: Any
) -> dict[str, Any]:
    service = target.service
    if source.path is None:
        try:
            return service.add(
                target.project_id,
                collection,
                actor=_actor(),
                text=sys.stdin.read(),
                doc_id=doc_id,
                title=title,
                metadata=metadata,
            )
        except KnowledgeRefused as exc:
            raise KnowledgeRefused(f"stdin: {exc.message.removeprefix('text: ')}") from None
    name = source.path.name
    try:
        cap = service.limits.max_file_bytes
        if source.path.stat().st_size > cap:
            raise KnowledgeRefused(f"{source.shown}: larger than {cap} bytes")
        data = source.path.read_bytes()
    except OSError as exc:
        raise KnowledgeRefused(f"{source.shown}: cannot read it ({exc.strerror or exc})") from None
    try:
        return service.add(
            target.project_id,
            collection,
            actor=_actor(),
            file_name=name,
            data=data,
            doc_id=doc_id,
            title=title,
            metadata=metadata,
        )
    except KnowledgeRefused as exc:
        # The service names the file by its name; name it as it was given.
        message = exc.message
        if message.startswith(f"{name}: "):
            message = message[len(name) + 2 :]
        raise KnowledgeRefused(f"{source.shown}: {message}") from None


@app.command("add")
def knowledge_add(
    project: ProjectArg,
    collection: CollectionArg,
    files: Annotated[
        list[str],
        typer.Argument(
            metavar="FILE...",
            help="Files (.txt .md .html .pdf .docx), folders (each such file in them), '-' (stdin's text).",
            show_default=False,
        ),
    ],
    doc_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="The document's id (one file only; default: from its text).", show_default=False
        ),
    ] = None,
    title: Annotated[
        str | None, typer.Option("--title", help="The title of each document.", show_default=False)
    ] = None,
    metadata: Annotated[
        str | None,
        typer.Option(
            "--metadata", metavar="JSON", help="A JSON object kept with each document.", show_default=False
        ),
    ] = None,
    keep_going: Annotated[
        bool, typer.Option("--keep-going", help="Go on past a file that is refused (exit 2 at the end).")
    ] = False,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Add documents; prints `added|replaced|updated|unchanged  ID  FILE` per file.

    Without --id a document's id comes from its text: the same text again is unchanged. With
    --id a new text replaces the document's. A refused file stops the command (nothing of it
    written) unless --keep-going; either way the exit code is then 2."""
    from webui.knowledge.model import check_doc_id, check_metadata, check_name, check_title

    meta = _json_option("--metadata", metadata)
    if meta is not None and not isinstance(meta, dict):
        raise KnowledgeRefused("--metadata: must be a JSON object")
    try:  # what applies to every file is checked once, before anything is read or written
        check_name(collection)
        meta = check_metadata(meta)
        if doc_id is not None:
            check_doc_id(doc_id)
        check_title(title, "")
    except KnowledgeRefused as exc:
        option = "--metadata" if exc.message.startswith("metadata") else None
        raise KnowledgeRefused(f"{option}: {exc.message}" if option else exc.message) from None
    sources = _sources(files)
    if doc_id is not None and len(sources) != 1:
        raise ConfigError(f"--id applies to one file; {len(sources)} given")
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    results: list[dict[str, Any]] = []
    refused = 0
    for source in sources:
        try:
            done = _add_one(target, collection, source, doc_id=doc_id, title=title, metadata=meta)
        except (KnowledgeRefused, KnowledgeFull) as exc:
            refused += 1
            label = source.label
            _error_line(exc.message if exc.message.startswith(f"{label}: ") else f"{label}: {exc.message}")
            if not keep_going:
                break
            continue
        results.append({**done, "file": source.shown})
        if not as_json:
            echo(f"{done['status']:<9}  {done['id']}  {source.shown}")
    if as_json:
        _print_json(results)
    if refused:
        raise typer.Exit(2)


# ----------------------------------------------------------------- reads


@app.command("list")
def knowledge_list(
    project: ProjectArg,
    collection: CollectionOpt = None,
    filter_: FilterOpt = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", help="Documents per page (1-200, default 50).", show_default=False),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option("--after", metavar="ID", help="The page after this document id.", show_default=False),
    ] = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """List documents by id, a page at a time (the next page: --after the id printed last)."""
    filters = _filter(filter_)
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    page = target.service.documents(
        target.project_id, collection=collection, filter=filters, after=after, limit=limit
    )
    if as_json:
        _print_json(page)
        return
    docs = page["documents"]
    if not docs:
        echo("no documents", err=True)
    width = max((len(d["id"]) for d in docs), default=0)
    coll_width = max((len(d["collection"]) for d in docs), default=0)
    for doc in docs:
        echo(f"{doc['id']:<{width}}  {doc['collection']:<{coll_width}}  {_one_line(doc['title'])}".rstrip())
    if page["next"] is not None:
        echo(f"more: --after {page['next']}", err=True)


@app.command("show")
def knowledge_show(
    project: ProjectArg,
    doc_id: Annotated[str, typer.Argument(metavar="DOC_ID", help="The document's id.", show_default=False)],
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Show a document: its metadata, then its text."""
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    doc = target.service.get(target.project_id, doc_id)
    if doc is None:
        raise NotFound(f"no document {doc_id!r}")
    if as_json:
        _print_json(doc)
        return
    for key in ("id", "collection", "title", "source", "digest", "bytes", "chunks", "createdAt", "updatedAt"):
        echo(f"{key}: {_one_line(str(doc[key]))}")
    echo("metadata: ", json_text(doc["metadata"], indent=None, sort_keys=True))
    echo("")
    text = doc["text"]
    echo(text, nl=not text.endswith("\n"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


@app.command("search")
def knowledge_search(
    project: ProjectArg,
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help="Words to find (all required).", show_default=False)
    ],
    collection: Annotated[
        list[str] | None,
        typer.Option("--collection", help="Only in this collection (repeatable).", show_default=False),
    ] = None,
    filter_: FilterOpt = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Hits (1-50, default 10).", show_default=False)
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            metavar="auto|text|vector|hybrid",
            help="auto: hybrid with an embedding endpoint, else text.",
        ),
    ] = "auto",
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Search: rank, score, document id, title, and a snippet with the matching words marked."""
    filters = _filter(filter_)
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    found = target.service.search(
        target.project_id, query, collection=collection or None, filter=filters, limit=limit, mode=mode
    )
    if as_json:
        _print_json(found)
        return
    hits = found["hits"]
    if not hits:
        echo("no matches", err=True)
        return
    marks = BOLD if sys.stdout.isatty() else BRACKETS
    for rank, hit in enumerate(hits, start=1):
        echo(f"{rank}. {hit['score']:.4g}  {hit['documentId']}  {_one_line(hit['title'])}")
        echo("   ", highlighted(hit["snippet"], hit["highlights"], marks))


# ----------------------------------------------------------------- remove


@app.command("remove")
def knowledge_remove(
    project: ProjectArg,
    doc_id: Annotated[
        str | None, typer.Argument(metavar="DOC_ID", help="The document to remove.", show_default=False)
    ] = None,
    collection: Annotated[
        str | None,
        typer.Option(
            "--collection", help="Remove this collection and all its documents.", show_default=False
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Remove a collection without asking.")] = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Remove a document, or a whole collection (--collection C; asks unless --yes)."""
    if (doc_id is None) == (collection is None):
        raise ConfigError("give a DOC_ID or --collection C (one of them)")
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    if doc_id is not None:
        if not target.service.remove(target.project_id, doc_id, actor=_actor()):
            raise NotFound(f"no document {doc_id!r}")
        echo(f"removed {doc_id}")
        return
    assert collection is not None
    try:
        view = target.service.collection(target.project_id, collection)
    except NotFound:  # unknown (said below), or a removal cut short: decided already, finished now
        view = None
    if not yes and view is not None:
        what = f"collection {collection} and its {view['documents']} document(s)"
        if not sys.stdin.isatty():
            raise ConfigError(f"--yes is required to remove {what}")
        if not typer.confirm(terminal_safe(f"Remove {what}?")):
            raise typer.Exit(1)
    done = target.service.remove_collection(target.project_id, collection, actor=_actor())
    echo(f"removed collection {collection} ({done['removedDocuments']} document(s))")


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


@app.command("export")
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

    target = _target(project, data_dir, database_url, persistent_value_store_dir)
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


@app.command("import")
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
    target = _target(project, data_dir, database_url, persistent_value_store_dir)
    try:
        counts = target.service.import_lines(target.project_id, lines, actor=_actor())
    except (KnowledgeRefused, KnowledgeFull) as exc:
        raise KnowledgeRefused(f"{where}: {exc.message}") from None
    _audit_alone(target, AuditName.KNOWLEDGE_IMPORTED, {"lines": len(lines), **counts})
    echo(
        f"imported {where}: {counts['collections']} collection(s) created; documents: "
        f"{counts['added']} added, {counts['replaced']} replaced, {counts['updated']} updated,"
        f" {counts['unchanged']} unchanged"
    )
