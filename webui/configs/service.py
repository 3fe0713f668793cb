"""Named configurations of a project: the one service behind the CLI, the JSON API, the
configuration page and the run snapshot.

A place is a project's declared fields plus a scope (project id and owner: an account on the
server, the admin principal or the local operator). Every scope has a `default`
configuration and exactly one active configuration. Values are checked against the fields on
every write; a configuration stored before the fields changed is shown with its problems
("needs update") and refused as a run's configuration (`config_invalid`). Secret values are
write-only: sealed at rest, shown as a mask, never in audit details; writing the mask back
keeps the stored secret. Methods block (database): async callers use `run_db`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.configs.exports import IMPORT_MODES, export_document, export_entries, read_document
from webui.configs.model import (
    DEFAULT_MAX_PER_SCOPE,
    MASK,
    PRINCIPAL_OWNER_ID,
    ConfigPlace,
    ConfigSnapshot,
    ConfigView,
    Who,
    check_name,
)
from webui.configs.redaction import LOG_SECRETS, Redaction, sealed_secrets
from webui.configs.secrets import PREFIX as SEALED_PREFIX
from webui.configs.secrets import SecretBox
from webui.errors import (
    ConfigurationConflict,
    ConfigurationInvalid,
    ConfigurationNotFound,
    ConfigurationRefused,
    TooManyConfigurations,
)
from webui.store import configs as store
from webui.store.configs import DEFAULT_NAME, NameTaken, Replacement, StaleRevision
from webui.store.models import ProjectConfig, Run, as_utc
from webui.workflows.configuration import (
    effective_values,
    value_problems,
)


def _conflict(place: ConfigPlace, name: str, read: int | None, current: int | None) -> ConfigurationConflict:
    if current is None:
        message = f"configuration {name!r} no longer exists (you read revision {read})"
    elif read is None:
        message = f"configuration {name!r} already exists at revision {current}"
    else:
        message = f"configuration {name!r} is at revision {current}, but the write read revision {read}"
    return ConfigurationConflict(message, name=name, read=read, current=current)


def _problems(place: ConfigPlace, stored: dict[str, Any]) -> dict[str, str]:
    """The stored values' problems against today's fields; a sealed secret is never quoted
    (a field that was a secret and is now, say, a select)."""
    shown = {
        k: (MASK if isinstance(v, str) and v.startswith(SEALED_PREFIX) else v) for k, v in stored.items()
    }
    return value_problems(place.fields, shown)


def _invalid(name: str, problems: dict[str, str]) -> ConfigurationInvalid:
    listed = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
    return ConfigurationInvalid(f"configuration {name!r} is not valid: {listed}", problems)


class ConfigService:
    def __init__(
        self, engine: Engine, *, box: SecretBox, audit: AuditLog, max_per_scope: int = DEFAULT_MAX_PER_SCOPE
    ) -> None:
        self.engine = engine
        self.box = box
        self.audit = audit
        self.max_per_scope = max_per_scope

    def _full(self, place: ConfigPlace) -> TooManyConfigurations:
        return TooManyConfigurations(
            f"too_many_configs: the scope {place.owner} of project {place.project_id} already holds"
            f" {self.max_per_scope} configurations, the most one scope may hold"
            " (STEAMHARNESS_MAX_CONFIGS_PER_SCOPE); delete one first",
            limit=self.max_per_scope,
        )

    # ----------------------------------------------------------------- reading

    def _rows(self, place: ConfigPlace) -> list[ProjectConfig]:
        rows = store.list_configs(self.engine, place.scope)
        if not any(r.name == DEFAULT_NAME for r in rows):
            defaults = {f.name: f.default for f in place.fields if f.has_default}
            store.ensure_default(self.engine, place.scope, defaults)
            rows = store.list_configs(self.engine, place.scope)
        return rows

    def _view(self, place: ConfigPlace, row: ProjectConfig) -> ConfigView:
        secret = {f.name for f in place.fields if f.secret}
        values = {k: (MASK if k in secret else v) for k, v in row.values.items()}
        return ConfigView(
            name=row.name,
            revision=row.revision,
            active=row.active,
            values=values,
            problems=_problems(place, row.values),
            updated_at=as_utc(row.updated_at),
            updated_by=row.updated_by,
        )

    def _row(self, place: ConfigPlace, name: str) -> ProjectConfig:
        for row in self._rows(place):
            if row.name == name:
                return row
        raise ConfigurationNotFound(
            f"project {place.project_id} has no configuration {name!r} ({place.owner})"
        )

    def _row_at(self, place: ConfigPlace, name: str, revision: int) -> ProjectConfig:
        """The row of `name`, which the caller read at `revision` (else `config_conflict`)."""
        row = self._row(place, name)
        if row.revision != revision:
            raise _conflict(place, name, revision, row.revision)
        return row

    def _revision_of(self, place: ConfigPlace, name: str) -> int | None:
        return next((r.revision for r in self._rows(place) if r.name == name), None)

    def list(self, place: ConfigPlace) -> list[ConfigView]:
        return [self._view(place, r) for r in self._rows(place)]

    def show(self, place: ConfigPlace, name: str) -> ConfigView:
        return self._view(place, self._row(place, name))

    def active(self, place: ConfigPlace) -> ConfigView:
        rows = self._rows(place)
        row = next((r for r in rows if r.active), None) or next(r for r in rows if r.name == DEFAULT_NAME)
        return self._view(place, row)

    # ----------------------------------------------------------------- values

    def _binding(self, place: ConfigPlace, field_name: str) -> str:
        return f"{place.scope.project_id}/{place.scope.owner_id}/{field_name}"

    def _merge(
        self,
        place: ConfigPlace,
        name: str,
        stored: dict[str, Any],
        changes: dict[str, Any],
        unset: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The stored values with `changes` applied (secrets sealed; the mask keeps the stored
        secret) and the `unset` fields removed."""
        if not isinstance(changes, dict):
            raise ConfigurationRefused("values must be a JSON object of field names to values")
        secret = {f.name for f in place.fields if f.secret}
        merged = dict(stored)
        problems: dict[str, str] = {}
        for key, value in changes.items():
            if key in secret and value == MASK:
                if key not in stored:
                    problems[key] = "the mask stands for a stored secret, and none is stored"
                continue
            if key in secret and isinstance(value, str):
                merged[key] = self.box.seal(value, binding=self._binding(place, key))
            else:
                merged[key] = value
        for key in unset:
            merged.pop(key, None)
        problems = {**_problems(place, merged), **problems}
        if problems:
            raise _invalid(name, problems)
        return merged

    def _plain(self, place: ConfigPlace, stored: dict[str, Any]) -> dict[str, Any]:
        secret = {f.name for f in place.fields if f.secret}
        return {
            k: (
                self.box.open(v, binding=self._binding(place, k)) if k in secret and isinstance(v, str) else v
            )
            for k, v in stored.items()
        }

    # ----------------------------------------------------------------- audit

    def _audit(
        self, place: ConfigPlace, who: Who, event: AuditName, target: str | None, **details: Any
    ) -> store.AuditWrite:
        def write(s: Session) -> None:
            self.audit.record(
                s,
                event,
                actor=who.actor,
                project_id=place.project_id,
                target=target,
                outcome="ok",
                source=who.source,
                client_address=who.client_address,
                user_agent=who.user_agent,
                details={"scope": place.owner, **details},
            )

        return write

    # ----------------------------------------------------------------- writes

    def create(
        self, place: ConfigPlace, name: str, values: dict[str, Any], who: Who, *, copy_of: str | None = None
    ) -> ConfigView:
        """A new configuration: from `values`, or a copy of `copy_of`'s stored values."""
        check_name(name)
        # One read of the scope (which also creates its `default`), for the source if any.
        stored: dict[str, Any] = {}
        if copy_of is not None:
            stored = self._row(place, copy_of).values
        else:
            self._rows(place)
        merged = self._merge(place, name, stored, values if copy_of is None else {})
        event = AuditName.CONFIG_COPIED if copy_of else AuditName.CONFIG_CREATED
        try:
            row = store.add_config(
                self.engine,
                place.scope,
                name=name,
                values=merged,
                actor=who.actor,
                audit=self._audit(place, who, event, name, fields=sorted(merged), source_config=copy_of),
                cap=self.max_per_scope,
            )
        except NameTaken:
            raise _conflict(place, name, None, self._revision_of(place, name)) from None
        except store.ScopeFull:
            raise self._full(place) from None
        return self._view(place, row)

    def copy(self, place: ConfigPlace, name: str, new_name: str, who: Who) -> ConfigView:
        return self.create(place, new_name, {}, who, copy_of=name)

    def set(
        self,
        place: ConfigPlace,
        name: str,
        *,
        revision: int,
        values: dict[str, Any],
        unset: Sequence[str] = (),
        who: Who,
    ) -> ConfigView:
        """Change some values of `name`, read at `revision` (stale → `config_conflict`)."""
        row = self._row_at(place, name, revision)
        merged = self._merge(place, name, row.values, values, unset)
        changed = sorted(k for k in set(merged) | set(row.values) if merged.get(k) != row.values.get(k))
        try:
            row = store.write_values(
                self.engine,
                place.scope,
                name=name,
                revision=revision,
                values=merged,
                actor=who.actor,
                audit=self._audit(
                    place, who, AuditName.CONFIG_UPDATED, name, fields=changed, revision=revision + 1
                ),
            )
        except StaleRevision as exc:
            raise _conflict(place, name, revision, exc.found) from None
        return self._view(place, row)

    def rename(self, place: ConfigPlace, name: str, new_name: str, *, revision: int, who: Who) -> ConfigView:
        check_name(new_name, "new configuration name")
        if name == DEFAULT_NAME:
            raise ConfigurationRefused("the default configuration cannot be renamed (copy it instead)")
        self._row_at(place, name, revision)
        try:
            row = store.rename_config(
                self.engine,
                place.scope,
                name=name,
                new_name=new_name,
                revision=revision,
                actor=who.actor,
                audit=self._audit(place, who, AuditName.CONFIG_RENAMED, new_name, old_name=name),
            )
        except StaleRevision as exc:
            raise _conflict(place, name, revision, exc.found) from None
        except NameTaken:
            raise _conflict(place, new_name, None, self._revision_of(place, new_name)) from None
        return self._view(place, row)

    def delete(self, place: ConfigPlace, name: str, *, revision: int, who: Who) -> None:
        if name == DEFAULT_NAME:
            raise ConfigurationRefused("the default configuration cannot be deleted")
        self._row_at(place, name, revision)
        try:
            store.delete_config(
                self.engine,
                place.scope,
                name=name,
                revision=revision,
                audit=self._audit(place, who, AuditName.CONFIG_DELETED, name, revision=revision),
            )
        except StaleRevision as exc:
            raise _conflict(place, name, revision, exc.found) from None

    def activate(self, place: ConfigPlace, name: str, who: Who) -> ConfigView:
        self._row(place, name)
        if not store.activate_config(
            self.engine,
            place.scope,
            name=name,
            audit=self._audit(place, who, AuditName.CONFIG_ACTIVATED, name),
        ):
            raise ConfigurationNotFound(f"project {place.project_id} has no configuration {name!r}")
        return self.show(place, name)

    # ----------------------------------------------------------------- runs

    def snapshot(self, place: ConfigPlace, name: str | None = None) -> ConfigSnapshot:
        """The configuration a run starts with: `name`, or the scope's active one. A
        configuration that does not satisfy today's fields refuses (`config_invalid`)."""
        rows = self._rows(place)
        if name is None:
            row = next((r for r in rows if r.active), None) or next(r for r in rows if r.name == DEFAULT_NAME)
        else:
            row = next((r for r in rows if r.name == name), None)
            if row is None:
                raise ConfigurationNotFound(
                    f"project {place.project_id} has no configuration {name!r} ({place.owner})"
                )
        problems = _problems(place, row.values)
        if problems:
            listed = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
            raise ConfigurationInvalid(
                f"configuration {row.name!r} (revision {row.revision}) needs update before a run can use it: "
                f"{listed}",
                problems,
            )
        try:
            plain = self._plain(place, row.values)
        except ValueError as exc:
            raise ConfigurationInvalid(
                f"configuration {row.name!r}: a secret value cannot be read ({exc}); set it again",
                {
                    k: "cannot be decrypted"
                    for k in row.values
                    if k in {f.name for f in place.fields if f.secret}
                },
            ) from None
        secret = {f.name for f in place.fields if f.secret}
        LOG_SECRETS.remember(v for k, v in plain.items() if k in secret and isinstance(v, str))
        return ConfigSnapshot(
            name=row.name,
            revision=row.revision,
            values=effective_values(place.fields, plain),
            stored=row.values,
        )

    def run_redaction(self, run: Run) -> Redaction:
        """What hides the secret values `run` started with (see `webui.configs.redaction`)."""
        owners = [PRINCIPAL_OWNER_ID] if run.account_id is None else [run.account_id, PRINCIPAL_OWNER_ID]
        found = sealed_secrets(self.box, project_id=run.project_id, owners=owners, values=run.config_values)
        LOG_SECRETS.remember(found)
        return Redaction(found)

    # ----------------------------------------------------------------- export / import

    def export(self, place: ConfigPlace, *, secrets: bool, who: Who) -> dict[str, Any]:
        """One JSON document with every configuration of the scope; secret values only when
        `secrets` (an audited choice), otherwise listed as omitted."""
        rows = self._rows(place)
        configurations = export_entries(place, rows, secrets=secrets, plain=self._plain)
        active = next((r.name for r in rows if r.active), DEFAULT_NAME)
        self.audit.record_alone(
            self.engine,
            AuditName.CONFIG_EXPORTED,
            actor=who.actor,
            project_id=place.project_id,
            outcome="ok",
            source=who.source,
            client_address=who.client_address,
            user_agent=who.user_agent,
            details={"scope": place.owner, "with_secrets": secrets, "configurations": len(rows)},
        )
        return export_document(place, configurations, active=active, secrets=secrets)

    def import_(
        self, place: ConfigPlace, doc: Any, *, mode: str = "merge", force: bool = False, who: Who
    ) -> list[ConfigView]:
        """Apply an export document: every configuration checked against today's fields,
        revision conflicts refused unless `force`; `merge` keeps configurations the document
        does not name, `replace` deletes them (except `default`). All or nothing."""
        if mode not in IMPORT_MODES:
            raise ConfigurationRefused(f"import mode {mode!r} is not one of: {', '.join(IMPORT_MODES)}")
        entries, active = read_document(place, doc)
        rows = {r.name: r for r in self._rows(place)}
        writes: list[Replacement] = []
        problems: dict[str, str] = {}
        secret = {f.name for f in place.fields if f.secret}
        for entry in entries:
            name, values, revision = entry["name"], entry["values"], entry["revision"]
            existing = rows.get(name)
            base = {k: v for k, v in existing.values.items() if k in secret} if existing else {}
            try:
                merged = self._merge(place, name, base, values)
            except ConfigurationInvalid as exc:
                problems.update({f"{name}.{k}": v for k, v in exc.fields.items()})
                continue
            # The `default` every scope is born with, never written since, is no conflict.
            pristine = existing is not None and existing.revision == 1 and existing.updated_by is None
            writes.append(Replacement(name=name, values=merged, expected=revision, force=force or pristine))
        if problems:
            listed = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
            raise ConfigurationInvalid(f"the import does not fit this project's fields: {listed}", problems)
        if (
            active not in (None, DEFAULT_NAME)
            and active not in {w.name for w in writes}
            and (mode == "replace" or active not in rows)
        ):
            raise ConfigurationRefused(f"the document's active configuration {active!r} is not in it")

        def conflict(name: str, expected: int | None, found: int | None) -> Exception:
            error = _conflict(place, name, expected, found)
            error.message += " (import with force to overwrite)"
            error.args = (error.message,)
            return error

        try:
            store.import_configs(
                self.engine,
                place.scope,
                writes=writes,
                remove_others=mode == "replace",
                active=active,
                actor=who.actor,
                audit=self._audit(
                    place,
                    who,
                    AuditName.CONFIG_IMPORTED,
                    None,
                    mode=mode,
                    force=force,
                    configurations=[w.name for w in writes],
                ),
                conflict=conflict,
                cap=self.max_per_scope,
            )
        except store.ScopeFull:
            raise self._full(place) from None
        return self.list(place)
