"""What a new account's name and password must be, in one place. A broken rule is a field
error: the admin page shows it next to its field (422), the CLI prints them as one line."""

from __future__ import annotations

from webui.errors import SteamharnessError

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")
NAME_MAX = 64
PASSWORD_MIN = 8
PASSWORD_MAX = 1024
FIELD_LABELS = {"name": "user name", "password": "password"}


class InvalidAccount(SteamharnessError):
    """A new account that breaks the rules; `errors` holds one sentence per field."""

    code = "invalid_account"
    status = 422

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(
            "; ".join(f"{FIELD_LABELS.get(field, field)}: {text}" for field, text in errors.items())
        )
        self.errors = errors


def name_taken(name: str) -> str:
    return f"A user named {name} already exists."


def new_account_errors(name: str, password: str | None) -> dict[str, str]:
    """The broken rules by field ("name", "password"); empty when both are fine. No password
    (None) is allowed: such an account can only use API keys. Whether the name is free is
    the writer's to check."""
    errors: dict[str, str] = {}
    if not name or len(name) > NAME_MAX or set(name) - NAME_CHARS:
        errors["name"] = f"Use 1–{NAME_MAX} letters, digits and . _ - @"
    if password is not None and len(password) < PASSWORD_MIN:
        errors["password"] = f"Use at least {PASSWORD_MIN} characters, or none for an API-key-only account."
    elif password is not None and len(password) > PASSWORD_MAX:
        errors["password"] = f"Use at most {PASSWORD_MAX} characters."
    return errors
