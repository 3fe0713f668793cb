"""API keys, the server admin key, and who a Bearer credential is.

Raw keys look like `shk_<12 hex>_<secret>`: the middle part is the key's public id (the
row is found by primary key, no scan), the secret is compared by SHA-256 in constant
time. Only hashes are stored; the raw key is shown once, when created. Embed tokens
(`she_`) and webhook secrets (`shw_`) are credentials of their own endpoints and are
refused by name on the MCP endpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from webui.errors import SteamharnessError
from webui.store import accounts as account_store
from webui.store.models import ApiKey, ProjectCredential

KEY_PREFIX = "shk_"
CREDENTIAL_PREFIXES = {"embed_token": "she_", "webhook_secret": "shw_"}
SCOPES = ("runs.create", "runs.read", "configs", "knowledge")
DEFAULT_SCOPES = ("runs.create",)


class AuthError(SteamharnessError):
    """No usable credential: HTTP 401."""

    code = "unauthorized"
    status = 401


class AmbiguousAuthorization(AuthError):
    """More than one Authorization header: HTTP 400. Servers and proxies disagree on which
    one counts, so none does."""

    code = "bad_request"
    status = 400


def single_authorization(values: list[str]) -> str | None:
    """The request's one Authorization header value (None when absent). The only place that
    decides which header authenticates a request: the guard, the MCP gateway and the API
    dependency all go through it."""
    if len(values) > 1:
        raise AmbiguousAuthorization("send exactly one Authorization header")
    return values[0] if values else None


def authorization_values(raw_headers: Sequence[tuple[bytes, bytes]]) -> list[str]:
    """Every Authorization header of an ASGI scope's raw header list, in order."""
    return [v.decode("latin-1") for k, v in raw_headers if k.lower() == b"authorization"]


class Forbidden(SteamharnessError):
    """A credential without the permission or scope needed: HTTP 403."""

    code = "forbidden"
    status = 403


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    kind: str  # admin | key
    actor: str  # what the audit log names: "admin" or "user:<name>"
    fingerprint: str  # keyed fingerprint of the credential: sessions bind to it
    key_id: str | None = None
    account_id: int | None = None
    scopes: frozenset[str] = frozenset()
    projects: frozenset[str] | None = None  # None: all projects

    def may_run(self, project_id: str) -> bool:
        return self.kind == "admin" or (
            "runs.create" in self.scopes and (self.projects is None or project_id in self.projects)
        )

    def may_read(self, project_id: str) -> bool:
        if self.kind == "admin":
            return True
        in_scope = bool(self.scopes & {"runs.create", "runs.read"})
        return in_scope and (self.projects is None or project_id in self.projects)

    def may_change_knowledge(self, project_id: str) -> bool:
        """Add and remove the project's knowledge-base documents (the `knowledge` scope)."""
        return self.kind == "admin" or (
            "knowledge" in self.scopes and (self.projects is None or project_id in self.projects)
        )

    def require_run(self, project_id: str) -> None:
        if self.kind == "admin":
            return
        if self.projects is not None and project_id not in self.projects:
            raise Forbidden("this API key (or its account) has no run permission on this project")
        if "runs.create" not in self.scopes:
            raise Forbidden("this API key lacks the runs.create scope")


def new_api_key(
    *, account_id: int, name: str | None, scopes: list[str], projects: list[str] | None
) -> tuple[str, ApiKey]:
    """Returns (raw key, row). The raw key exists only in the return value."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise SteamharnessError(f"unknown scope {unknown[0]!r} (known: {', '.join(SCOPES)})")
    public = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = ApiKey(
        id=f"key_{public}",
        account_id=account_id,
        name=name,
        secret_hash=sha256_hex(secret),
        scopes=sorted(set(scopes)),
        projects=sorted(set(projects)) if projects else None,
    )
    return f"{KEY_PREFIX}{public}_{secret}", row


def new_project_credential(*, project_id: str, kind: str) -> tuple[str, ProjectCredential]:
    raw = f"{CREDENTIAL_PREFIXES[kind]}{secrets.token_urlsafe(32)}"
    row = ProjectCredential(
        id=f"cred_{secrets.token_hex(6)}", project_id=project_id, kind=kind, secret_hash=sha256_hex(raw)
    )
    return raw, row


def _effective_projects(found: account_store.KeyRecord) -> frozenset[str] | None:
    """What the key may run: its own project list, within what the account was granted
    (admins: every project). Read on every request, so a removed grant takes effect at once."""
    key_projects = frozenset(found.projects) if found.projects is not None else None
    if found.is_admin:
        return key_projects
    return found.grants if key_projects is None else found.grants & key_projects


class Authenticator:
    """Bearer credential -> Principal. Reads the key row on every call: a revocation made
    by any process sharing the store takes effect on the very next request."""

    def __init__(self, engine: Engine, *, admin_key: str | None, fingerprint_secret: bytes) -> None:
        self.engine = engine
        self._admin_hash = sha256_hex(admin_key) if admin_key else None
        self._secret = fingerprint_secret

    def fingerprint(self, raw: str) -> str:
        return hmac.new(self._secret, raw.encode(), hashlib.sha256).hexdigest()[:32]

    def from_header(self, headers: list[str]) -> Principal:
        """Every Authorization header the request carried (see `single_authorization`)."""
        header = single_authorization(headers)
        if header is None or not header.strip():
            raise AuthError("missing Authorization: Bearer <API key>")
        scheme, _, raw = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise AuthError("only Authorization: Bearer <API key> is accepted")
        raw = raw.strip()
        if not raw:
            raise AuthError("empty Bearer credential")
        return self.authenticate(raw)

    def current(self, principal: Principal) -> Principal:
        """`principal` as its key stands now: scopes and grants read again, so a change
        made since the request (or session) began counts."""
        if principal.kind == "admin" or principal.key_id is None:
            return principal
        found = account_store.key_record(self.engine, key_id=principal.key_id)
        if found is None or found.revoked or found.disabled:
            raise Forbidden("this API key is revoked or its account disabled")
        return dataclasses.replace(
            principal, scopes=frozenset(found.scopes), projects=_effective_projects(found)
        )

    def authenticate(self, raw: str) -> Principal:
        if self._admin_hash is not None and hmac.compare_digest(sha256_hex(raw), self._admin_hash):
            return Principal(kind="admin", actor="admin", fingerprint=self.fingerprint(raw))
        if raw.startswith(KEY_PREFIX):
            public, sep, secret = raw[len(KEY_PREFIX) :].partition("_")
            found = account_store.key_record(self.engine, key_id=f"key_{public}") if sep else None
            if found is not None and hmac.compare_digest(sha256_hex(secret), found.secret_hash):
                if found.revoked:
                    raise AuthError("this API key has been revoked")
                if found.disabled:
                    raise AuthError("this account is disabled")
                return Principal(
                    kind="key",
                    actor=f"user:{found.account_name}",
                    fingerprint=self.fingerprint(raw),
                    key_id=f"key_{public}",
                    account_id=found.account_id,
                    scopes=frozenset(found.scopes),
                    projects=_effective_projects(found),
                )
            raise AuthError("invalid API key")
        for kind, prefix in CREDENTIAL_PREFIXES.items():
            if raw.startswith(prefix) and account_store.find_project_credential(
                self.engine, secret_hash=sha256_hex(raw)
            ):
                label = kind.replace("_", " ")
                raise AuthError(f"a {label} cannot authenticate the MCP endpoint; use an API key")
        raise AuthError("invalid API key")
