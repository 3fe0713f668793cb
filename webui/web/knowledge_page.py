"""The knowledge-base page of a project (to be built)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
