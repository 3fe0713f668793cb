"""The configuration export document: its format, and reading one back for an import.

The service (`ConfigService.export`, `ConfigService.import_`) writes and applies it; this
module only knows the document's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from webui.configs.model import ConfigPlace, check_name
from webui.errors import ConfigurationRefused
from webui.store.models import ProjectConfig, utcnow
from webui.workflows.configuration import fields_digest

EXPORT_FORMAT: Final = "steamharness.configurations"
EXPORT_VERSION: Final = 1
IMPORT_MODES: Final = ("merge", "replace")


def export_entries(
    place: ConfigPlace,
    rows: Sequence[ProjectConfig],
    *,
    secrets: bool,
    plain: Callable[[ConfigPlace, dict[str, Any]], dict[str, Any]],
) -> list[dict[str, Any]]:
    """The document's configurations: secret values in clear (`plain`) only when `secrets`,
    otherwise left out and listed as omitted."""
    secret = {f.name for f in place.fields if f.secret}
    configurations: list[dict[str, Any]] = []
    for row in rows:
        if secrets:
            values = plain(place, row.values)
            omitted: list[str] = []
        else:
            values = {k: v for k, v in row.values.items() if k not in secret}
            omitted = sorted(k for k in row.values if k in secret)
        entry: dict[str, Any] = {"name": row.name, "revision": row.revision, "values": values}
        if omitted:
            entry["omittedSecrets"] = omitted
        configurations.append(entry)
    return configurations


def export_document(
    place: ConfigPlace, configurations: list[dict[str, Any]], *, active: str, secrets: bool
) -> dict[str, Any]:
    """The export document around its configurations."""
    return {
        "format": EXPORT_FORMAT,
        "formatVersion": EXPORT_VERSION,
        "projectId": place.project_id,
        "fieldsDigest": fields_digest(place.fields),
        "exportedAt": utcnow().isoformat(),
        "active": active,
        "secretsIncluded": secrets,
        "configurations": configurations,
    }


def read_document(place: ConfigPlace, doc: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The entries (name, values, revision) and the active name of an export document for
    `place`, or `ConfigurationRefused` naming the first thing wrong with it."""
    if not isinstance(doc, dict):
        raise ConfigurationRefused("an import must be a JSON object (an export document)")
    if doc.get("format") != EXPORT_FORMAT:
        raise ConfigurationRefused(f"not a configuration export: format must be {EXPORT_FORMAT!r}")
    version = doc.get("formatVersion")
    if version != EXPORT_VERSION:
        raise ConfigurationRefused(
            f"export format version {version!r} is not supported (this version reads {EXPORT_VERSION})"
        )
    if doc.get("projectId") != place.project_id:
        raise ConfigurationRefused(
            f"the export is of project {doc.get('projectId')!r}, not {place.project_id}"
        )
    raw = doc.get("configurations")
    if not isinstance(raw, list):
        raise ConfigurationRefused("configurations: expected a list")
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        where = f"configurations[{index}]"
        if not isinstance(item, dict):
            raise ConfigurationRefused(f"{where}: expected an object")
        name = check_name(item.get("name"), f"{where}.name")
        if name in seen:
            raise ConfigurationRefused(f"{where}.name: {name!r} appears twice")
        seen.add(name)
        values = item.get("values", {})
        if not isinstance(values, dict):
            raise ConfigurationRefused(f"{where}.values: expected an object")
        revision = item.get("revision")
        if revision is not None and (
            not isinstance(revision, int) or isinstance(revision, bool) or revision < 1
        ):
            raise ConfigurationRefused(f"{where}.revision: expected a positive integer")
        entries.append({"name": name, "values": values, "revision": revision})
    active = doc.get("active")
    if active is not None and not isinstance(active, str):
        raise ConfigurationRefused("active: expected a configuration name")
    return entries, active
