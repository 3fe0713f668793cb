"""One exception family with stable codes.

Services raise these; transports map them once: the CLI prints `message` as one line on
stderr, the MCP layer turns `InvalidArguments` into JSON-RPC InvalidParams, HTTP maps
`status`. Messages are written for the person who has to fix the input, so they never
carry tracebacks or internal paths they did not give us.
"""

from __future__ import annotations


class SteamharnessError(Exception):
    """Base of every error the product reports on purpose."""

    code = "internal"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProjectError(SteamharnessError):
    """A workflow project folder that cannot be served (bad package.json, wrong type...)."""

    code = "invalid_project"
    status = 404


class ConfigError(SteamharnessError):
    """A command-line option or setting that cannot be used as given."""

    code = "invalid_config"
    status = 400


class InvalidArguments(SteamharnessError):
    """Tool arguments that do not satisfy the entrypoint's input schema (JSON-RPC -32602)."""

    code = "invalid_params"
    status = 400


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


class ServerUnreachable(SteamharnessError):
    """A steamharness server the CLI talks to did not answer (or not like one)."""

    code = "server_unreachable"
    status = 502


class KeyRefused(SteamharnessError):
    """A steamharness server did not accept the key the CLI offered it."""

    code = "key_refused"
    status = 401
