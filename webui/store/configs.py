"""Named project configurations, one scope per (project, owner).

Every write is conditional on the revision the caller read: the UPDATE or DELETE names it in
its WHERE clause, so of two writers that read the same revision exactly one wins, whatever
the database. A refused write raises `StaleRevision` with the revision found. The caller's
`audit` callback runs in the same transaction as the change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, bytewise
from webui.store.models import ProjectConfig, utcnow

DEFAULT_NAME = "default"


class StaleRevision(Exception):
    """The configuration changed (or vanished) since the caller read it."""

    def __init__(self, name: str, found: int | None) -> None:
        super().__init__(name)
        self.name = name
        self.found = found


class ScopeFull(Exception):
    """The write would leave the scope with more than `cap` configurations (nothing written)."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.cap = cap


def _lock_scope(s: Session, scope: Scope, cap: int | None) -> None:
    """Serialize writers that count a scope's configurations (PostgreSQL; SQLite's first
    INSERT already does), until the transaction ends."""
    conn = s.connection()
    if cap is not None and conn.dialect.name == "postgresql":
        key = f"configs:{scope.project_id}:{scope.owner_id}"
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})


def _check_cap(s: Session, scope: Scope, cap: int | None) -> None:
    """Counted in the writing transaction, after its own rows are flushed."""
    if cap is not None and len(s.exec(_scope_query(scope)).all()) > cap:
        s.rollback()
        raise ScopeFull(cap)


class NameTaken(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class Scope:
    project_id: str
    owner_id: int


def _scope_query(scope: Scope) -> Any:
    return select(ProjectConfig).where(
        ProjectConfig.project_id == scope.project_id, ProjectConfig.owner_id == scope.owner_id
    )


def list_configs(engine: Engine, scope: Scope) -> list[ProjectConfig]:
    """The scope's configurations by name."""
    with Session(engine, expire_on_commit=False) as s:
        return list(s.exec(_scope_query(scope).order_by(bytewise(col(ProjectConfig.name)))).all())


def ensure_default(engine: Engine, scope: Scope, values: dict[str, Any]) -> None:
    """Create the `default` configuration (active if nothing is) unless it exists."""
    with Session(engine) as s:
        rows = list(s.exec(_scope_query(scope)).all())
        if any(r.name == DEFAULT_NAME for r in rows):
            return
        s.add(
            ProjectConfig(
                project_id=scope.project_id,
                owner_id=scope.owner_id,
                name=DEFAULT_NAME,
                values=values,
                active=not any(r.active for r in rows),
            )
        )
        try:
            s.commit()
        except IntegrityError:  # created meanwhile by another writer
            s.rollback()


def _find(s: Session, scope: Scope, name: str) -> ProjectConfig | None:
    return s.exec(_scope_query(scope).where(ProjectConfig.name == name)).first()


def add_config(
    engine: Engine,
    scope: Scope,
    *,
    name: str,
    values: dict[str, Any],
    actor: str | None,
    audit: AuditWrite,
    cap: int | None = None,
) -> ProjectConfig:
    """A new configuration at revision 1 (`NameTaken` if the scope has one of that name,
    `ScopeFull` if the scope would then hold more than `cap`)."""
    row = ProjectConfig(
        project_id=scope.project_id, owner_id=scope.owner_id, name=name, values=values, updated_by=actor
    )
    with Session(engine, expire_on_commit=False) as s:
        _lock_scope(s, scope, cap)
        s.add(row)
        try:
            s.flush()
        except IntegrityError:
            raise NameTaken(name) from None
        _check_cap(s, scope, cap)
        audit(s)
        s.commit()
    return row


def _conditional(s: Session, scope: Scope, name: str, revision: int, statement: Any) -> None:
    """Run an UPDATE/DELETE already restricted to (scope, name, revision); none matched →
    `StaleRevision` with what is there now."""
    result = s.execute(
        statement.where(
            col(ProjectConfig.project_id) == scope.project_id,
            col(ProjectConfig.owner_id) == scope.owner_id,
            col(ProjectConfig.name) == name,
            col(ProjectConfig.revision) == revision,
        )
    )
    if result.rowcount != 1:  # pyright: ignore[reportAttributeAccessIssue]
        s.rollback()
        current = _find(s, scope, name)
        raise StaleRevision(name, current.revision if current is not None else None)


def write_values(
    engine: Engine,
    scope: Scope,
    *,
    name: str,
    revision: int,
    values: dict[str, Any],
    actor: str | None,
    audit: AuditWrite,
) -> ProjectConfig:
    """Replace the values of configuration `name` read at `revision`; bumps the revision."""
    with Session(engine, expire_on_commit=False) as s:
        _conditional(
            s,
            scope,
            name,
            revision,
            update(ProjectConfig).values(
                values=values, revision=revision + 1, updated_at=utcnow(), updated_by=actor
            ),
        )
        audit(s)
        s.commit()
        row = _find(s, scope, name)
        assert row is not None
        return row


def rename_config(
    engine: Engine,
    scope: Scope,
    *,
    name: str,
    new_name: str,
    revision: int,
    actor: str | None,
    audit: AuditWrite,
) -> ProjectConfig:
    with Session(engine, expire_on_commit=False) as s:
        try:
            _conditional(
                s,
                scope,
                name,
                revision,
                update(ProjectConfig).values(
                    name=new_name, revision=revision + 1, updated_at=utcnow(), updated_by=actor
                ),
            )
        except IntegrityError:
            raise NameTaken(new_name) from None
        audit(s)
        s.commit()
        row = _find(s, scope, new_name)
        assert row is not None
        return row


def delete_config(engine: Engine, scope: Scope, *, name: str, revision: int, audit: AuditWrite) -> None:
    """Delete `name` read at `revision`; if it was active, `default` becomes active."""
    with Session(engine) as s:
        was_active = (row := _find(s, scope, name)) is not None and row.active
        _conditional(s, scope, name, revision, delete(ProjectConfig))
        if was_active:
            _activate(s, scope, DEFAULT_NAME)
        audit(s)
        s.commit()


def _activate(s: Session, scope: Scope, name: str) -> None:
    for row in s.exec(_scope_query(scope)).all():
        if row.active != (row.name == name):
            row.active = row.name == name
            s.add(row)


def activate_config(engine: Engine, scope: Scope, *, name: str, audit: AuditWrite) -> bool:
    """Make `name` the scope's active configuration; False if there is no such configuration."""
    with Session(engine) as s:
        if _find(s, scope, name) is None:
            return False
        _activate(s, scope, name)
        audit(s)
        s.commit()
        return True


@dataclass(frozen=True)
class Replacement:
    """One configuration an import writes: `revision` is what the importer expects to find
    (None: it must not exist, or, forced, whatever is there)."""

    name: str
    values: dict[str, Any]
    expected: int | None
    force: bool


def import_configs(
    engine: Engine,
    scope: Scope,
    *,
    writes: Iterable[Replacement],
    remove_others: bool,
    active: str | None,
    actor: str | None,
    audit: AuditWrite,
    conflict: Callable[[str, int | None, int | None], Exception],
    cap: int | None = None,
) -> list[ProjectConfig]:
    """Write every configuration of an import in one transaction, or none: a configuration
    whose revision is not the expected one (unless forced) raises `conflict(name, expected,
    found)`. `remove_others` deletes the scope's configurations the import does not name
    (never `default`). `ScopeFull`: the scope would hold more than `cap`."""
    writes = list(writes)
    with Session(engine, expire_on_commit=False) as s:
        _lock_scope(s, scope, cap)
        existing = {r.name: r for r in s.exec(_scope_query(scope)).all()}
        for w in writes:
            row = existing.get(w.name)
            found = row.revision if row is not None else None
            if not w.force and found != w.expected and found is not None:
                raise conflict(w.name, w.expected, found)
            if row is None:
                s.add(
                    ProjectConfig(
                        project_id=scope.project_id,
                        owner_id=scope.owner_id,
                        name=w.name,
                        values=w.values,
                        updated_by=actor,
                    )
                )
            else:
                row.values = w.values
                row.revision += 1
                row.updated_at = utcnow()
                row.updated_by = actor
                s.add(row)
        if remove_others:
            named = {w.name for w in writes} | {DEFAULT_NAME}
            for name, row in existing.items():
                if name not in named:
                    s.delete(row)
        s.flush()
        _check_cap(s, scope, cap)
        if active is not None:
            _activate(s, scope, active)
        elif not any(r.active for r in s.exec(_scope_query(scope)).all()):
            _activate(s, scope, DEFAULT_NAME)
        audit(s)
        s.commit()
        return list(s.exec(_scope_query(scope).order_by(bytewise(col(ProjectConfig.name)))).all())
