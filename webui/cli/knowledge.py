"""`steamharness knowledge …`: a project's knowledge base from the command line.

PROJECT is a project folder (the knowledge base `steamharness mcp` serves it with: the data
dir's persistent-value store, under the id in its package.json) or a registered project's
id (the server's). The knowledge base lives in the persistent-value store: the data dir's
database, or `values.sqlite3` in `--persistent-value-store-dir` when given. Every write is
audited (source `cli`); errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    echo,
    terminal_safe,
)
from webui.cli.knowledge_common import (
    CollectionArg,
    JsonOpt,
    ProjectArg,
    ValuesDirOpt,
    cli_actor,
    open_target,
    print_json,
)
from webui.cli.knowledge_documents import knowledge_add, knowledge_list, knowledge_search, knowledge_show
from webui.cli.knowledge_transfer import knowledge_export, knowledge_import
from webui.errors import ConfigError, NotFound

app = typer.Typer(
    help="A project's knowledge base (on a project folder or a server project id).",
    no_args_is_help=True,
)


# ----------------------------------------------------------------- collections


def knowledge_collections(
    project: ProjectArg,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
    persistent_value_store_dir: ValuesDirOpt = None,
) -> None:
    """List the collections: documents, chunks, bytes of text and language of each."""
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    views = target.service.collections(target.project_id)
    if as_json:
        print_json(views)
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
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    view = target.service.create_collection(
        target.project_id, collection, language=language, actor=cli_actor()
    )
    if view["created"]:
        echo(f"created collection {view['name']} (language {view['language']})")
    else:
        echo(
            f"collection {view['name']} exists already (language {view['language']},"
            f" {view['documents']} document(s))"
        )


# ----------------------------------------------------------------- remove


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
    target = open_target(project, data_dir, database_url, persistent_value_store_dir)
    if doc_id is not None:
        if not target.service.remove(target.project_id, doc_id, actor=cli_actor()):
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
    done = target.service.remove_collection(target.project_id, collection, actor=cli_actor())
    echo(f"removed collection {collection} ({done['removedDocuments']} document(s))")


# Registered here, in this order: the order of `steamharness knowledge --help` and the CLI reference.
app.command("collections")(knowledge_collections)
app.command("create")(knowledge_create)
app.command("add")(knowledge_add)
app.command("list")(knowledge_list)
app.command("show")(knowledge_show)
app.command("search")(knowledge_search)
app.command("remove")(knowledge_remove)
app.command("export")(knowledge_export)
app.command("import")(knowledge_import)
