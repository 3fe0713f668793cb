"""This server takes API keys, not OAuth: how a refused credential is challenged and what the
OAuth discovery paths say.

Any 401 sends an OAuth-capable MCP client (the MCP Inspector, the SDKs given an auth provider,
the editors) looking for OAuth. So that what it then prints says the key is the problem:

- every 401 of the MCP endpoint and of the JSON API carries
  `WWW-Authenticate: Bearer realm="steamharness", error="invalid_token", error_description="…"`
  (`bearer_challenge`): what was wrong with the credential and where keys are made. A missing
  key gets `invalid_token` too, as the MCP SDK's own resource server answers (RFC 6750 would
  send a bare challenge, which clients read as "start OAuth" all the same);
- the discovery paths the Python and TypeScript SDK clients and the MCP Inspector probe
  (`webui.web.no_oauth`) answer 404 with `OAuthNotOffered`'s message (`no_oauth_message`).

The description is a quoted-string of RFC 6750's restricted set (printable ASCII without `"`
and `\\`), cut to `DESCRIPTION_MAX` characters: nothing a request carries can end the value,
add a parameter or a header. Its parts are fixed sentences and the server's base URL (the
configured public URL, else the request's scheme and Host, which the guard has already checked
against the allowed hosts)."""

from __future__ import annotations

import re

from webui.errors import SteamharnessError

REALM = "steamharness"
DESCRIPTION_MAX = 300
# RFC 6750 section 3: error_description is %x20-21 / %x23-5B / %x5D-7E.
_NOT_QDTEXT = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


class OAuthNotOffered(SteamharnessError):
    """An OAuth discovery, registration, authorization or token path (`/.well-known/oauth-*`,
    `/.well-known/openid-configuration`, `/register`, `/authorize`, `/token`): this server
    offers no OAuth; it takes API keys (`Authorization: Bearer <key>`). Answered in OAuth's
    error shape, which OAuth clients print: `{"error": "oauth_not_offered", "error_description"}`."""

    code = "oauth_not_offered"
    status = 404


def header_safe(text: str, limit: int = DESCRIPTION_MAX) -> str:
    """`text` as the inside of a WWW-Authenticate quoted-string: every character outside
    RFC 6750's set (quotes, backslashes, control characters, CR and LF, non-ASCII) made `?`,
    at most `limit` characters."""
    safe = _NOT_QDTEXT.sub("?", text[: limit + 1])
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def keys_page(base: str) -> str:
    return f"{base.rstrip('/')}/keys"


def api_keys_hint(base: str) -> str:
    """The sentence every refusal of a credential ends with."""
    return f"This server takes API keys: send Authorization: Bearer <key> (create one at {keys_page(base)})"


def bearer_challenge(reason: str, base: str) -> str:
    """The WWW-Authenticate value of a 401: `reason` (what was wrong with the credential,
    one of the server's own sentences) and where keys are made."""
    description = header_safe(f"{reason.rstrip('.')}. {api_keys_hint(base)}")
    return f'Bearer realm="{REALM}", error="invalid_token", error_description="{description}"'


def no_oauth_message(base: str) -> str:
    """What an OAuth discovery path answers (with 404)."""
    return (
        "This server does not offer OAuth: it takes API keys. A 401 from it means the API key was "
        f"missing, wrong or revoked. Send Authorization: Bearer <key>; create a key at {keys_page(base)}."
    )


def no_oauth_error(base: str) -> OAuthNotOffered:
    return OAuthNotOffered(no_oauth_message(base))
