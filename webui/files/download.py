"""A created file served over HTTP: where it is fetched from and the headers it goes with.

Every file is an attachment, never shown inline: `Content-Disposition: attachment` with a
name safe for any stored name (RFC 6266: an ASCII `filename` with nothing that could end
the value or the header, then the exact name as RFC 5987 `filename*`); types a browser
would run (HTML, SVG, XML, script) are sent as `application/octet-stream`; `nosniff` and a
sandboxing CSP keep a browser from reading it as a page. Who may fetch it is the rule for
reading the run that created it (the route's, `webui.web.api`). A download lasts as long as
its client takes to read it: one account has at most `max_downloads_per_account` under way at
once (`DownloadSlots`), so it cannot hold every connection of the server.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import quote

from webui.errors import SteamharnessError
from webui.files.store import MIME_TYPE_RE, sanitize_name
from webui.slots import CountedSlots

# The route: the file under the run that created it, so the run's read rule is the file's.
PATH = "/api/runs/{run_id}/files/{file_id}"
OCTET_STREAM = "application/octet-stream"
# Types a browser renders as a page or runs as script: never sent under their own type.
ACTIVE_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/xsl",
        "application/xslt+xml",
        "text/javascript",
        "application/javascript",
        "application/ecmascript",
        "text/ecmascript",
        "application/x-javascript",
        "text/css",
        "application/x-shockwave-flash",
        "multipart/x-mixed-replace",
    }
)
FALLBACK_CHARS = 150  # the ASCII `filename`; the full name goes in `filename*`
# What an ASCII fallback name keeps: printable ASCII but the quote and backslash (which
# would end or escape the quoted string), percent (some browsers decode %XX in `filename`),
# the path separator, and `;` `,` `=` (a naive parser splits the header on them).
_DROPPED = frozenset('"\\%/;,=')
# Headers on every download (besides its type, length and disposition).
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "private, no-store",
}


def download_path(run_id: str, file_id: str) -> str:
    """Where a file the run created is fetched (path only; quoted, though ids need none)."""
    return PATH.format(run_id=quote(run_id, safe=""), file_id=quote(file_id, safe=""))


def served_type(mime_type: str) -> str:
    """The Content-Type a stored file is sent with: its own, unless a browser would run it
    (or it is not a plain `type/subtype`), then `application/octet-stream`."""
    value = mime_type.strip().lower()
    if not MIME_TYPE_RE.fullmatch(value):
        return OCTET_STREAM
    if value in ACTIVE_TYPES or value.endswith(("+xml", "/xml")) or "script" in value or "html" in value:
        return OCTET_STREAM
    return value


def ascii_fallback(name: str) -> str:
    """The name as RFC 6266's `filename` may carry it in a quoted string: printable ASCII
    only (accents folded, anything else `_`), none of `_DROPPED`, bounded."""
    folded = unicodedata.normalize("NFKD", name)
    chars = []
    for ch in folded:
        if unicodedata.combining(ch):
            continue
        chars.append(ch if " " <= ch <= "~" and ch not in _DROPPED else "_")
    text = "".join(chars).strip(" .") or "file"
    if len(text) > FALLBACK_CHARS:
        stem, dot, ext = text.rpartition(".")
        suffix = f".{ext}" if dot and stem and len(ext) <= 16 else ""
        text = text[: FALLBACK_CHARS - len(suffix)] + suffix
    return text


def content_disposition(name: str) -> str:
    """`attachment` with both names (RFC 6266, RFC 5987): for any `name`, one header value of
    printable ASCII whose only `;`, `=` and quotes are its own, so nothing can add a
    parameter or a header."""
    clean = sanitize_name(name)
    return f"attachment; filename=\"{ascii_fallback(clean)}\"; filename*=UTF-8''{quote(clean, safe='')}"


class TooManyDownloads(SteamharnessError):
    """An account already has as many downloads under way as it may."""

    code = "too_many_downloads"
    status = 429


class DownloadSlots(CountedSlots[str]):
    """Downloads under way per account (its actor), at most `limit` at once."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit, self._refusal)

    def _refusal(self, count: int) -> Exception:
        return TooManyDownloads(
            f"this account already has {count} downloads under way (the limit is {self.limit});"
            " retry when one has finished"
        )
