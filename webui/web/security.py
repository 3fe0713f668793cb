"""CSRF checks for cookie-authenticated writes. (The security headers every response gets:
`webui.edge.headers`.)"""

from __future__ import annotations

import hmac

from webui.errors import SteamharnessError


class CsrfError(SteamharnessError):
    code = "csrf"
    status = 403


def check_csrf(expected: str, submitted: str | None) -> None:
    if not submitted or not hmac.compare_digest(expected, submitted):
        raise CsrfError("the form is stale or was not sent by this site; reload the page and try again")
