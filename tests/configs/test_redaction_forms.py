"""`webui.configs.redaction.Redaction` on its own: a multi-line secret met line by line, and
the head of a long text redacted as if the whole were, reading no further than it must."""

from __future__ import annotations

from webui.configs.redaction import REDACTED, Redaction

PEM = "-----BEGIN KEY-----\nc2VjcmV0LWxpbmUtb25l\nab\n-----END KEY-----"


def test_each_line_of_a_multi_line_secret_is_a_secret_of_its_own() -> None:
    r = Redaction([PEM])
    assert r.text(PEM) == REDACTED
    # Met a line at a time (stdout lines): every line of 4 characters or more is hidden.
    assert [r.text(line) for line in PEM.splitlines()] == [REDACTED, REDACTED, "ab", REDACTED]


def test_the_head_of_a_text_hides_a_secret_straddling_its_end() -> None:
    secret = "tok-SECRETPREFIX-and-the-rest"
    r = Redaction([secret])
    text = "p" * 90 + secret + "q" * 10_000
    head = r.head(text, 100)
    assert len(head) == 100 and "tok-" not in head and head.startswith("p" * 90 + REDACTED[:10])
    assert r.head("short", 100) == "short"
    assert Redaction([]).head("x" * 500, 100) == "x" * 100
