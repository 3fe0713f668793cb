"""One exception family with stable codes.

Services raise these; transports map them once: the CLI prints `message` as one line on
stderr, the MCP layer turns `InvalidArguments` into a tool error result the model reads
(`isError`, SEP-1303), HTTP maps `status`. Messages are written for the person who has to
fix the input, so they never carry tracebacks or internal paths they did not give us.
"""

from __future__ import annotations


class SteamharnessError(Exception):
    """Base of every error the product reports on purpose."""

    code = "internal"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> dict[str, object]:
        """Extra members of the error's JSON body, next to code and message (none by default)."""
        return {}


class StoreUnavailable(SteamharnessError):
    """The store could not take a write just now (its database is locked, its disk is full):
    nothing was written. `retry_after`: seconds a client may wait before trying again, when
    that is known."""

    code = "store_unavailable"
    status = 503
    retry_after: int | None = None


class StorageFull(StoreUnavailable):
    """The disk or the database's storage is full (SQLite `database or disk is full`,
    ENOSPC/EDQUOT on a file write, PostgreSQL SQLSTATE 53100): nothing was written; it works
    again once space is freed."""

    code = "storage_full"
    status = 507

    def __init__(self, message: str = "the server's storage is full; try again once space is freed") -> None:
        super().__init__(message)


class ProjectError(SteamharnessError):
    """A workflow project folder that cannot be served (bad package.json, wrong type...)."""

    code = "invalid_project"
    status = 404


class ProjectProblems(ProjectError):
    """Every problem found in a project at once (its package.json's, its handlers'), each one
    line `<file>[:<line>]: <problem>`; `message` is those lines."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)

    def details(self) -> dict[str, object]:
        return {"problems": list(self.problems)}


class ConfigError(SteamharnessError):
    """A command-line option or setting that cannot be used as given."""

    code = "invalid_config"
    status = 400


class BadJSON(SteamharnessError):
    """A JSON request body or uploaded JSON document that the strict reader refuses (not
    JSON, not UTF-8, a duplicate key, nested too deep, too long)."""

    code = "bad_json"
    status = 400


class InvalidArguments(SteamharnessError):
    """Tool arguments that do not satisfy the entrypoint's input schema, or a file param that
    names no file of the project; over MCP a tool result with `isError` naming the argument
    (SEP-1303), never JSON-RPC -32602 (that is an unknown tool's)."""

    code = "invalid_params"
    status = 400


class InvalidRequest(SteamharnessError):
    """A JSON API request whose path, query, headers or body do not have the shape the route
    declares; `fields` names each problem by where it is (`query.fileName`, `body.values`)."""

    code = "invalid_request"
    status = 422

    def __init__(self, message: str, fields: dict[str, str]) -> None:
        super().__init__(message)
        self.fields = fields

    def details(self) -> dict[str, object]:
        return {"fields": self.fields}


class NotFound(SteamharnessError):
    code = "not_found"
    status = 404


class InteractionConflict(SteamharnessError):
    """A second, different answer to an interaction that already has one."""

    code = "conflict"
    status = 409


class InvalidAnswer(SteamharnessError):
    """An answer that does not satisfy the interaction's schema."""

    code = "invalid_answer"
    status = 422


class InteractionClosed(SteamharnessError):
    """The interaction can no longer be answered (its run ended, or it expired)."""

    code = "interaction_closed"
    status = 410


class InteractionExpired(InteractionClosed):
    """Nobody answered the interaction before its expiry (STEAMHARNESS_QUESTION_TIMEOUT_SECONDS
    for a run's question): it can no longer be answered."""

    code = "interaction_expired"


class ConfigurationInvalid(SteamharnessError):
    """Configuration values that do not satisfy the project's declared fields; `fields` names
    each problem (also what a run refuses to start with: `config_invalid`)."""

    code = "config_invalid"
    status = 422

    def __init__(self, message: str, fields: dict[str, str]) -> None:
        super().__init__(message)
        self.fields = fields

    def details(self) -> dict[str, object]:
        return {"fields": self.fields}


class ConfigurationConflict(SteamharnessError):
    """A write that states a revision other than the configuration's current one."""

    code = "config_conflict"
    status = 409

    def __init__(self, message: str, *, name: str, read: int | None, current: int | None) -> None:
        super().__init__(message)
        self.name = name
        self.read = read
        self.current = current

    def details(self) -> dict[str, object]:
        return {"name": self.name, "current": self.current, "read": self.read}


class ConfigurationNotFound(NotFound):
    code = "config_not_found"


class ConfigurationRefused(SteamharnessError):
    """A configuration operation that cannot be done as asked (a bad name, deleting
    `default`, an export document of another project or format)."""

    code = "config_refused"
    status = 400


class SecretsExportNeedsPost(SteamharnessError):
    """Exporting configurations with their secrets asked with GET: a link, a prefetch or an
    image tag can make a browser send a GET with its cookie, so secrets leave only on a POST
    (which a browser session must back with its CSRF token)."""

    code = "secrets_export_needs_post"
    status = 405


class OverCap(SteamharnessError):
    """A per-scope or per-account cap is reached; `limit` is said in the error's details."""

    status = 409

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit

    def details(self) -> dict[str, object]:
        return {"limit": self.limit}


class TooManyConfigurations(OverCap):
    """A scope already holds `limit` configurations (`STEAMHARNESS_MAX_CONFIGS_PER_SCOPE`)."""

    code = "too_many_configs"


class TooManyKeys(OverCap):
    """An account already holds `limit` live API keys (`STEAMHARNESS_MAX_KEYS_PER_ACCOUNT`)."""

    code = "too_many_keys"


class KnowledgeRefused(SteamharnessError):
    """Knowledge-base input that cannot be used as given: a file that cannot be read, a bad
    name or id, metadata or a filter of the wrong shape, a query with nothing to search."""

    code = "invalid_knowledge"
    status = 400


class KnowledgeFull(OverCap):
    """A project's knowledge base would hold more documents, bytes or chunks than its cap
    (`STEAMHARNESS_KNOWLEDGE_MAX_*`): nothing was written."""

    code = "knowledge_full"


class TooManyExtractions(SteamharnessError):
    """An account (`STEAMHARNESS_KNOWLEDGE_EXTRACTS_PER_ACCOUNT`) or the server
    (`STEAMHARNESS_KNOWLEDGE_EXTRACTS`) already has as many files being read as it may, and no
    turn came within `STEAMHARNESS_KNOWLEDGE_EXTRACT_WAIT_SECONDS`: nothing was read or written."""

    code = "too_many_extractions"
    status = 429
    retry_after = 5


class ServerUnreachable(SteamharnessError):
    """A steamharness server the CLI talks to did not answer (or not like one)."""

    code = "server_unreachable"
    status = 502


class KeyRefused(SteamharnessError):
    """A steamharness server did not accept the key the CLI offered it."""

    code = "key_refused"
    status = 401


class NotGranted(SteamharnessError):
    """A key asked for projects its account has no run permission on."""

    code = "not_granted"
    status = 403


class SchemaOutOfDate(SteamharnessError):
    """The database's schema is not the one this release needs (behind, made before
    migrations, empty, or migrated by a newer release); the message says what to run."""

    code = "schema_out_of_date"
    status = 503
