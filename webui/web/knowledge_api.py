"""JSON API of a project's knowledge base (to be built: see the module's owner)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/workflows/{project_id}/knowledge", tags=["knowledge"])
