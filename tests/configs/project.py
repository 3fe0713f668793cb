"""A small workflow project that declares one configuration field of each type, written into a
test's folder (the configurations API, page and browser tests register it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SETTINGS_PROJECT = "3c6f1d2e-9b8a-4f7e-8d6c-5b4a3f2e1d0c"
FIELDS: list[dict[str, Any]] = [
    {"name": "endpoint", "type": "string", "required": True, "default": "https://a.example"},
    {"name": "threshold", "type": "number", "default": 3, "description": "How many before alerting"},
    {"name": "dry_run", "type": "boolean"},
    {"name": "region", "type": "select", "options": [{"value": "eu", "label": "Europe"}, "us"]},
    {"name": "tags", "type": "multiselect", "options": ["a", "b", "c"]},
    {"name": "start", "type": "date"},
    {"name": "token", "type": "secret"},
]


def write_settings_project(folder: Path, fields: list[dict[str, Any]] | None = None) -> Path:
    """The project in `folder` (created or rewritten); `fields` replaces the declaration."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "id": SETTINGS_PROJECT,
        "name": "settings-demo",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "Declares one configuration field of each type.",
        "configuration": {"fields": FIELDS if fields is None else fields},
        "entrypoints": [{"id": "show", "title": "Show", "handler": "main.py:show", "params": []}],
    }
    (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    (folder / "main.py").write_text("def show(ctx):\n    return {'ok': True}\n", encoding="utf-8")
    return folder
