"""A value the templates put into a link (`url('route', param=value)`: stored data, perhaps
hostile) stays one path segment as a browser reads the link: a browser turns `\\` into `/`
in an http URL and resolves `.` and `..` segments (also written `%2e`), so neither may reach
the link as it is; the link then names no other page."""

from __future__ import annotations

from pathlib import Path

import pytest

from webui.app import create_app
from webui.settings import Settings
from webui.web.templating import make_templates

HOLES = ["..", ".", "..\\admin", "a\\b", "\\\\evil.example"]
HELD = ["../admin", "a/b", "a?b#c", "%2e%2e", ".%2e", "é"]


@pytest.fixture(scope="module")
def url() -> object:
    app = create_app(Settings(data_dir=Path("/nonexistent/url-segments")))  # never started
    return make_templates(app.router, 1).env.globals["url"]


def browser_segments(path: str) -> list[str]:
    """The path's segments as a browser reads an http URL: `\\` is `/`."""
    return path.replace("\\", "/").split("/")[1:]


@pytest.mark.parametrize("value", HELD)
def test_a_hostile_value_stays_one_segment_that_is_no_dot_segment(url: object, value: str) -> None:
    assert_one_segment(url, value)


@pytest.mark.parametrize("value", HOLES)
def test_a_backslash_or_dot_value_stays_one_segment_that_is_no_dot_segment(url: object, value: str) -> None:
    assert_one_segment(url, value)


def assert_one_segment(url: object, value: str) -> None:
    path = url("run_page", run_id=value)  # type: ignore[operator]
    segments = browser_segments(path)
    assert segments[0] == "runs" and len(segments) == 2, path
    assert segments[1].lower().replace("%2e", ".") not in (".", ".."), path
