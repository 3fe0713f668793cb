"""`steamharness knowledge add|list|show|search` (webui.cli.knowledge): a knowledge base's
documents: adding files, folders or stdin, and reading them back."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    echo,
    highlighted,
    json_text,
)
from webui.cli.knowledge_common import (
    BOLD,
    BRACKETS,
    CollectionArg,
    CollectionOpt,
    FilterOpt,
    JsonOpt,
    ProjectArg,
    Target,
    ValuesDirOpt,
    cli_actor,
    error_line,
    filter_json,
    json_option,
    open_target,
    print_json,
)
from webui.errors import ConfigError, KnowledgeFull, KnowledgeRefused, NotFound

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
                actor=cli_actor(),
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
            actor=cli_actor(),
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

    meta = json_option("--metadata", metadata)
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
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    results: list[dict[str, Any]] = []
    refused = 0
    for source in sources:
        try:
            done = _add_one(target, collection, source, doc_id=doc_id, title=title, metadata=meta)
        except (KnowledgeRefused, KnowledgeFull) as exc:
            refused += 1
            label = source.label
            error_line(exc.message if exc.message.startswith(f"{label}: ") else f"{label}: {exc.message}")
            if not keep_going:
                break
            continue
        results.append({**done, "file": source.shown})
        if not as_json:
            echo(f"{done['status']:<9}  {done['id']}  {source.shown}")
    if as_json:
        print_json(results)
    if refused:
        raise typer.Exit(2)


# ----------------------------------------------------------------- reads


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
    filters = filter_json(filter_)
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    page = target.service.documents(
        target.project_id, collection=collection, filter=filters, after=after, limit=limit
    )
    if as_json:
        print_json(page)
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


def knowledge_show(
    project: ProjectArg,
    doc_id: Annotated[str, typer.Argument(metavar="DOC_ID", help="The document's id.", show_default=False)],
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """Show a document: its metadata, then its text."""
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    doc = target.service.get(target.project_id, doc_id)
    if doc is None:
        raise NotFound(f"no document {doc_id!r}")
    if as_json:
        print_json(doc)
        return
    for key in ("id", "collection", "title", "source", "digest", "bytes", "chunks", "createdAt", "updatedAt"):
        echo(f"{key}: {_one_line(str(doc[key]))}")
    echo("metadata: ", json_text(doc["metadata"], indent=None, sort_keys=True))
    echo("")
    text = doc["text"]
    echo(text, nl=not text.endswith("\n"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


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
    filters = filter_json(filter_)
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    found = target.service.search(
        target.project_id, query, collection=collection or None, filter=filters, limit=limit, mode=mode
    )
    if as_json:
        print_json(found)
        return
    hits = found["hits"]
    if not hits:
        echo("no matches", err=True)
        return
    marks = BOLD if sys.stdout.isatty() else BRACKETS
    for rank, hit in enumerate(hits, start=1):
        echo(f"{rank}. {hit['score']:.4g}  {hit['documentId']}  {_one_line(hit['title'])}")
        echo("   ", highlighted(hit["snippet"], hit["highlights"], marks))
