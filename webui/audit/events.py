"""The names of the audit events the server writes: one member per event, so a writer
cannot misspell one and a reader finds every place that writes it. The values are what
the rows, the audit page's filters and its exports carry (`tool.called`, …); a member is
a `str`, equal to its value."""

from __future__ import annotations

from enum import StrEnum


class AuditName(StrEnum):
    AUDIT_EXPORTED = "audit.exported"

    AUTH_AMBIGUOUS = "auth.ambiguous"
    AUTH_DENIED = "auth.denied"
    AUTH_FAILED = "auth.failed"
    AUTH_THROTTLED = "auth.throttled"

    CONFIG_ACTIVATED = "config.activated"
    CONFIG_COPIED = "config.copied"
    CONFIG_CREATED = "config.created"
    CONFIG_DELETED = "config.deleted"
    CONFIG_EXPORTED = "config.exported"
    CONFIG_IMPORTED = "config.imported"
    CONFIG_RENAMED = "config.renamed"
    CONFIG_UPDATED = "config.updated"

    # A file a run created, downloaded (`GET /api/runs/{id}/files/{fileId}`).
    FILE_DOWNLOADED = "file.downloaded"
    FILE_REFUSED = "file.refused"
    FILE_UPLOADED = "file.uploaded"

    HOST_CONVERSATION_CREATED = "host.conversation.created"
    HOST_SERVER_CLOSED = "host.server.closed"
    HOST_SERVER_CONNECTING = "host.server.connecting"
    HOST_SERVER_FAILED = "host.server.failed"
    HOST_TOOL_CALLED = "host.tool.called"
    HOST_TOOL_FINISHED = "host.tool.finished"

    INTERACTION_ANSWERED = "interaction.answered"
    INTERACTION_EXPIRED = "interaction.expired"
    INTERACTION_REQUESTED = "interaction.requested"
    INTERACTION_REQUIRED = "interaction.required"

    KEY_CREATED = "key.created"
    KEY_REVOKED = "key.revoked"

    KNOWLEDGE_COLLECTION_CREATED = "knowledge.collection.created"
    KNOWLEDGE_COLLECTION_REMOVED = "knowledge.collection.removed"
    KNOWLEDGE_DOCUMENT_ADDED = "knowledge.document.added"
    KNOWLEDGE_DOCUMENT_REMOVED = "knowledge.document.removed"
    KNOWLEDGE_DOCUMENT_REPLACED = "knowledge.document.replaced"
    KNOWLEDGE_DOCUMENT_UPDATED = "knowledge.document.updated"
    KNOWLEDGE_EXPORTED = "knowledge.exported"
    KNOWLEDGE_IMPORTED = "knowledge.imported"

    PERMISSION_GRANTED = "permission.granted"
    PERMISSION_REVOKED = "permission.revoked"

    PROJECT_LIMITS_CHANGED = "project.limits_changed"
    PROJECT_PUBLISHED = "project.published"
    PROJECT_VERSION_OFFLINE = "project.version_offline"
    PROJECT_VERSION_ONLINE = "project.version_online"

    REQUEST_HOST_REFUSED = "request.host_refused"
    REQUEST_ORIGIN_REFUSED = "request.origin_refused"
    REQUEST_TOO_LARGE = "request.too_large"
    REQUEST_TOO_SLOW = "request.too_slow"

    RUN_CREATED = "run.created"
    RUN_FINISHED = "run.finished"
    RUN_INTERRUPTED = "run.interrupted"

    SESSION_CLOSED = "session.closed"
    SESSION_CREATED = "session.created"
    SESSION_DENIED = "session.denied"
    SESSION_REFUSED = "session.refused"
    SESSION_TERMINATED = "session.terminated"

    # A call's run is audited once: its `run.created` (with the call's session, target, client
    # address and user agent; `call` in details) is the call. This name still finds it, and
    # the rows written under it before.
    TOOL_CALLED = "tool.called"
    # Found as the `run.finished` of a call's run with the outcome `success` (and rows written before).
    TOOL_COMPLETED = "tool.completed"
    # A refusal before any run (its code, e.g. invalid_params); also finds the `run.finished` of a
    # call's run with any other outcome (and rows written before).
    TOOL_FAILED = "tool.failed"
    # The call became an MCP task (the tasks extension): its client follows the run with tasks/get.
    TOOL_TASK_CREATED = "tool.task_created"

    UI_LOGIN = "ui.login"
    UI_LOGOUT = "ui.logout"

    USER_CREATED = "user.created"
    USER_DISABLED = "user.disabled"
    USER_ENABLED = "user.enabled"
