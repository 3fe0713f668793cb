"""The JSON bodies of the knowledge-base API (`webui.web.knowledge_api`), as models: read by
`StrictBody`, described by the OpenAPI document. A member the model does not know is refused
by name; a member of the wrong shape in the words of the domain's own check
(`webui.knowledge.model`), which the service runs again for every other transport."""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from webui.errors import KnowledgeRefused
from webui.knowledge.model import (
    DOC_ID_RE,
    MAX_SEARCH_LIMIT,
    MAX_TITLE_CHARS,
    NAME_RE,
    check_doc_id,
    check_limit,
    check_metadata,
    check_name,
    check_title,
    parse_filter,
)
from webui.knowledge.text import MAX_QUERY_CHARS
from webui.web.json_body import ApiBody, Refuse
from webui.web.knowledge_access import KNOWLEDGE_JSON

NAME = f"^{NAME_RE.pattern}$"
DOC_ID = f"^{DOC_ID_RE.pattern}$"
NAME_RULE = "1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit"
METADATA = "a JSON object (at most 4 levels, 64 keys, 8 KiB)"
FILTER = 'metadata filter: {"key": value} or {"key": [value, ...]}'


class KnowledgeBody(ApiBody):
    """A knowledge body: an object of the members its model names, and no other."""

    model_config = ConfigDict(extra="forbid")
    refused = KnowledgeRefused
    limits = KNOWLEDGE_JSON


CollectionName = Annotated[str, Field(pattern=NAME, description=f"a collection name ({NAME_RULE})")]


class NewCollection(KnowledgeBody):
    name: Annotated[CollectionName, Refuse(check_name)]
    language: Annotated[
        str | None, Field(description="a Snowball language"), Refuse("language: expected a string")
    ] = None


class DocumentUpload(BaseModel):
    """A document from a file, as `multipart/form-data` (documents the form the route reads)."""

    collection: CollectionName
    file: Annotated[bytes, Field(description=".txt .md .html .pdf .docx")]
    id: Annotated[str | None, Field(description="default: from the collection and the text")] = None
    title: str | None = None
    metadata: Annotated[str | None, Field(description="a JSON object, as text")] = None


class NewDocument(KnowledgeBody):
    """A document from its text (JSON), or from a file (`multipart/form-data`)."""

    forms = MappingProxyType({"multipart/form-data": DocumentUpload})

    text: Annotated[str, Refuse('text: expected the document\'s text as a string (or upload a "file")')]
    collection: Annotated[CollectionName, Refuse(check_name)]
    id: Annotated[
        str | None,
        Field(pattern=DOC_ID, description="default: from the collection and the text"),
        Refuse(check_doc_id),
    ] = None
    metadata: Annotated[dict[str, Any] | None, Field(description=METADATA), Refuse(check_metadata)] = None
    title: Annotated[
        str | None, Field(max_length=MAX_TITLE_CHARS), Refuse(lambda title: check_title(title, ""))
    ] = None


def _query(query: Any) -> None:
    if not isinstance(query, str):
        raise KnowledgeRefused("the query must be a string")
    raise KnowledgeRefused(f"the query is longer than {MAX_QUERY_CHARS} characters")


def _collections(collection: Any) -> None:
    names = [collection] if isinstance(collection, str) else collection
    if not isinstance(names, list) or not names:
        raise KnowledgeRefused("collection must be a name or a non-empty list of names")
    for name in names:
        check_name(name)


class Search(KnowledgeBody):
    query: Annotated[
        str,
        Field(max_length=MAX_QUERY_CHARS),
        Refuse(_query, missing="query: the words to search for are missing"),
    ]
    mode: Annotated[
        Literal["auto", "text", "vector", "hybrid"] | None,
        Field(description="default: auto (hybrid with an embedding endpoint, else text)"),
        Refuse("mode must be auto, text, vector or hybrid"),
    ] = None
    limit: Annotated[
        int | None,
        Field(ge=1, le=MAX_SEARCH_LIMIT),
        Refuse(lambda limit: check_limit(limit, 10, MAX_SEARCH_LIMIT)),
    ] = None
    filter: Annotated[dict[str, Any] | None, Field(description=FILTER), Refuse(parse_filter)] = None
    collection: Annotated[
        CollectionName | Annotated[list[CollectionName], Field(min_length=1)] | None,
        Field(description="a collection, or several (default: every one)"),
        Refuse(_collections),
    ] = None
