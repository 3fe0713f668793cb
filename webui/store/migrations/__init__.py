"""The Alembic environment that migrates the store: `env.py`, the revisions in `versions/`,
and the frozen baseline schema (`baseline.py`). It ships inside the package, so an installed
wheel migrates with no alembic.ini: `webui.store.schema` configures Alembic in code.

`HEAD` is the newest revision, known here without importing Alembic so that opening the
store checks the schema with one query (a test keeps it equal to the revisions' head)."""

from __future__ import annotations

from pathlib import Path

HEAD = "0009_knowledge_removal"
BASELINE = "0001_baseline"
SCRIPT_DIR = Path(__file__).resolve().parent
