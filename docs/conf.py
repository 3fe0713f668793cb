"""The documentation site: Sphinx with MyST (Markdown pages) and the Furo theme.

Built by `scripts/docs build` (and, in strict mode, by `tests/docs/test_site.py` inside the
test command): every warning is an error, so a broken link, a missing anchor, a page left out
of every table of contents or a missing page fails the build. Nothing is fetched: the theme's
assets ship with it and no extension loads anything from a CDN."""

project = "steamharness MCP"
author = "steamharness"
copyright = "steamharness contributors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# Not pages: the example projects (tested as projects), the recorded MCP exchanges the
# generator reads, the build itself.
exclude_patterns = ["_build", "_fixtures", "examples", "**/__pycache__"]

# `page.md#a-heading` links resolve (and are checked) down to level-4 headings.
myst_heading_anchors = 4
myst_enable_extensions = ["deflist"]
# A link to a missing page or anchor is a warning, and the strict build fails on it.
myst_all_links_external = False

html_theme = "furo"
html_title = "steamharness MCP"
html_static_path: list[str] = []
html_copy_source = False
html_show_sourcelink = False
# No external resources: no fonts, no analytics, no search index from elsewhere.
html_theme_options = {"navigation_with_keys": True}
