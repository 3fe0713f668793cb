"""What the JSON API answers, as models: each route's `response_model`, so `/openapi.json`
describes its success the way it describes its body (`webui.web.json_body`). The routes
still build their answers as JSON-ready dicts (shared with the pages and the MCP edge); a
model names each member the answer has, and `response_model_exclude_unset` keeps a member
the route leaves out (a run's `output` or `error`) out of the answer too."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class View(BaseModel):
    """An answer's object: the members named here, and no others."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- api.py


class WhoAmI(View):
    kind: Literal["admin", "key"]
    actor: str
    keyId: str | None
    scopes: list[str]
    projects: list[str] | None  # None: every project


class WhoAmIAnswer(View):
    data: WhoAmI


class StoredFile(View):
    id: str
    name: str
    mimeType: str | None
    size: int
    sha256: str
    createdAt: str


class StoredFiles(View):
    data: list[StoredFile]


class Trace(View):
    traceId: str
    spanId: str | None


class RunConfiguration(View):
    name: str
    revision: int | None


class Interaction(View):
    interactionId: str
    runId: str | None
    kind: str
    title: str | None
    message: str | None
    fields: Any
    requestedSchema: Any


class RunEvent(View):
    kind: str
    source: str | None
    text: str | None
    data: Any
    at: str


class RunView(View):
    runId: str
    projectId: str
    version: str | None
    entrypointId: str
    entrypointTitle: str
    source: str
    status: str
    createdAt: str
    startedAt: str | None
    finishedAt: str | None
    params: dict[str, Any]
    parentRunId: str | None
    trace: Trace | None
    configuration: RunConfiguration | None
    output: Any = None  # when it succeeded
    error: Any = None  # when it did not
    interaction: Interaction | None = None  # its pending question, for whoever may see it
    events: list[RunEvent] | None = None  # its timeline: the server admin key only


class RunAnswer(View):
    data: RunView


class Answered(View):
    interactionId: str
    runId: str | None
    action: Literal["accept", "decline", "cancel"]
    repeated: bool


class AnsweredAnswer(View):
    data: Answered


# --------------------------------------------------------------------------- configs_api.py


class Configuration(View):
    name: str
    revision: int
    active: bool
    values: dict[str, Any]  # secrets masked
    needsUpdate: bool
    problems: Any
    updatedAt: str
    updatedBy: str | None


class ConfigurationAnswer(View):
    data: Configuration


class ConfigurationList(View):
    projectId: str
    scope: str
    fields: list[dict[str, Any]]  # each field's declaration, as package.json has it
    active: str
    configurations: list[Configuration]


class ConfigurationListAnswer(View):
    data: ConfigurationList


class Imported(View):
    active: str
    configurations: list[Configuration]


class ImportedAnswer(View):
    data: Imported


# --------------------------------------------------------------------------- knowledge_api.py


class KnowledgeCollection(View):
    name: str
    language: str
    documents: int
    chunks: int
    bytes: int  # of text
    vectorBytes: int
    createdAt: str


class KnowledgeCollections(View):
    collections: list[KnowledgeCollection]


class KnowledgeCollectionMade(KnowledgeCollection):
    created: bool  # False: it existed (200)


class KnowledgeCollectionRemoved(View):
    name: str
    removedDocuments: int


class KnowledgeDocument(View):
    id: str
    collection: str
    title: str
    metadata: dict[str, Any]
    source: str  # "text", or the name of the file it was read from
    digest: str  # sha256 of the text
    bytes: int  # of text, in UTF-8
    chunks: int
    createdAt: str
    updatedAt: str


class KnowledgeDocumentText(KnowledgeDocument):
    text: str


class KnowledgeDocumentPage(View):
    documents: list[KnowledgeDocument]  # without their texts
    next: str | None  # the `after` of the next page; None: the last page


class KnowledgeDocumentAdded(KnowledgeDocument):
    status: Literal["added", "replaced", "updated", "unchanged"]


class KnowledgeChunk(View):
    position: int
    start: int
    end: int


class KnowledgeHit(View):
    documentId: str
    collection: str
    title: str
    metadata: dict[str, Any]
    chunk: KnowledgeChunk
    score: float
    snippet: str
    highlights: list[list[int]]  # [start, end] in the snippet


class KnowledgeSearchResult(View):
    mode: Literal["text", "vector", "hybrid"]
    approximate: bool  # more chunks matched than were ranked: only the newest were
    hits: list[KnowledgeHit]


class KnowledgeImported(View):
    collections: int  # created
    added: int
    replaced: int
    updated: int
    unchanged: int
