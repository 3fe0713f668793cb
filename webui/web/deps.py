"""Annotated dependency aliases for routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from webui.auth.keys import Principal
from webui.services import Services
from webui.workflows.registry import ProjectRegistry


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_registry(request: Request) -> ProjectRegistry:
    return request.app.state.registry


def get_principal(request: Request) -> Principal:
    """Bearer API key or admin key, checked on every request."""
    return request.app.state.authenticator.from_header(request.headers.get("authorization"))


ServicesDep = Annotated[Services, Depends(get_services)]
RegistryDep = Annotated[ProjectRegistry, Depends(get_registry)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
