"""Whose question is it: who may see a pending interaction and who may answer it.

A question belongs to the person who asked for the work: the account whose API key, or
whose browser session through Try it, started the run (a host request: the owner of the
host conversation it was made in). Only that account sees it and answers it, on every
channel. Everyone else is told it does not exist (404), so ids are not confirmed.

The admin principal (the server admin key, or the local operator of a stdio server) has
no account. Its runs, and host requests no single conversation was waiting for, belong to
the administrators: the admin key answers them through the API, and any administrator
account answers them in the browser like its own.

Administrators see every question, but answer one that belongs to an account only through
an explicit override (`override: true` in the API, "Answer as administrator" in the
browser); the answer records the override, and so does its `interaction.answered` event.
"""

from __future__ import annotations

from dataclasses import dataclass

from webui.auth.keys import Principal
from webui.auth.ui import UiUser
from webui.errors import NotFound, SteamharnessError


class OverrideRequired(SteamharnessError):
    """An administrator answered someone else's question without saying so."""

    code = "override_required"
    status = 403


@dataclass(frozen=True)
class Party:
    """Who looks at or answers an interaction."""

    account_id: int | None  # None: the admin principal
    is_admin: bool
    actor: str | None = None

    @classmethod
    def of_user(cls, user: UiUser) -> Party:
        return cls(user.account_id, user.is_admin, user.actor)

    @classmethod
    def of_principal(cls, principal: Principal) -> Party:
        # An admin account's own API key is that account, not the administrators: the
        # override is for the admin key and the administrators' browser sessions.
        if principal.kind == "admin":
            return cls(None, True, principal.actor)
        return cls(principal.account_id, False, principal.actor)

    def owns(self, owner: int | None) -> bool:
        """`owner`: the owning account's id; None for the admin principal's questions."""
        return self.is_admin if owner is None else self.account_id == owner

    def may_see(self, owner: int | None) -> bool:
        return self.is_admin or self.owns(owner)


def check_answer(party: Party, owner: int | None, *, override: bool, interaction_id: str) -> bool:
    """May `party` answer? Returns whether the answer is an administrator override;
    raises NotFound for anyone who may not see the question at all."""
    if party.owns(owner):
        return False
    if not party.is_admin:
        raise NotFound(f"interaction {interaction_id!r} not found")
    if not override:
        raise OverrideRequired(
            "this question belongs to another account; answer it as administrator explicitly "
            '("override": true) if you must, and the override is audited'
        )
    return True
