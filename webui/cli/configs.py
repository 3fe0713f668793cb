"""`steamharness configs …`: a project's named configurations from the command line.

PROJECT is a project folder (its local scope in the data dir, the one `steamharness mcp`
uses) or a registered project's id (the server's database: the admin principal's scope, or
an account's with `--account`). Every write states the revision it read; secret values are
read from stdin (`--secret FIELD`), never from the command line, and shown masked.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from webui import strict_json
from webui.cli.common import (
    DatabaseOpt,
    DataDirOpt,
    cli_audit,
    echo,
    json_text,
    load_settings,
    open_store,
    server_settings,
)
from webui.cli.configs_values import command_line_values
from webui.errors import ConfigError, ConfigurationRefused

if TYPE_CHECKING:
    from webui.configs.model import ConfigPlace, ConfigView, Who
    from webui.configs.service import ConfigService

app = typer.Typer(
    help="A project's named configurations (on a project folder or a server project id).",
    no_args_is_help=True,
)

UUID_RE: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

ProjectArg = Annotated[
    str,
    typer.Argument(
        metavar="PROJECT",
        help="A project folder (local scope) or a registered project's id (server scope).",
        show_default=False,
    ),
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="Configuration name.", show_default=False)]
AccountOpt = Annotated[
    str | None,
    typer.Option(
        "--account",
        help="Server project id only: this account's configurations (default: the admin principal's).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the service's JSON instead of text.")]
RevisionOpt = Annotated[
    int | None,
    typer.Option("--revision", help="The revision you read (see `configs show`).", show_default=False),
]
AssignArgs = Annotated[
    list[str] | None,
    typer.Argument(metavar="FIELD=VALUE", help="Field values, typed by the field.", show_default=False),
]
SecretOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        metavar="FIELD",
        help="A secret field whose value is read from stdin, one line each (repeatable).",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Target:
    """The service and the place (fields + scope) a command works on."""

    service: ConfigService
    place: ConfigPlace
    shown: str  # the scope, for messages


def _target(project: str, account: str | None, data_dir: Path | None, database_url: str | None) -> Target:
    from webui.configs.places import account_place, local_place
    from webui.services import config_service
    from webui.store import accounts as account_store
    from webui.store.db import make_engine, private_dir

    folder = Path(project).expanduser()
    if folder.exists():
        if account is not None:
            raise ConfigError(
                "--account applies to a server project id; a project folder has one local scope"
            )
        settings = load_settings({"data_dir": data_dir, "database_url": database_url}, admin_key=False)
        settings = settings.model_copy(update={"data_dir": settings.data_dir.expanduser().resolve()})
        place = local_place(folder.resolve())
        private_dir(settings.data_dir)
        engine = make_engine(settings.resolved_database_url, busy_timeout=settings.db_busy_timeout_seconds)
        shown = f"local scope of {place.project_id}"
    elif UUID_RE.fullmatch(project):
        settings = server_settings(data_dir, database_url)
        engine, registry = open_store(settings)
        project_id = project.lower()
        fields = registry.draft(project_id).config_fields
        if account is None:
            place = account_place(project_id, fields, account_id=None, account_name=None)
        else:
            row = account_store.get_account(engine, name=account)
            if row is None or row.id is None:
                raise ConfigError(f"--account: no account named {account!r}")
            place = account_place(project_id, fields, account_id=row.id, account_name=row.name)
        shown = f"{place.owner} scope of {project_id}"
    else:
        raise ConfigError(
            f"PROJECT {project!r} is neither an existing project folder nor a project id (a UUID)"
        )
    return Target(config_service(settings, engine, cli_audit()), place, shown)


def _who() -> Who:
    from webui.configs.model import Who

    return Who(actor="cli", source="cli")


def _need_revision(revision: int | None, project: str, name: str) -> int:
    if revision is None:
        raise ConfigError(
            f"--revision is required: give the revision you read "
            f"(`steamharness configs show {project} {name}` prints it)"
        )
    return revision


# ----------------------------------------------------------------- output


def _print_json(data: Any) -> None:
    echo(json_text(data))


def _show_text(place: ConfigPlace, view: ConfigView) -> None:
    echo(f"name: {view.name}")
    echo(f"revision: {view.revision}")
    echo(f"active: {'yes' if view.active else 'no'}")
    echo(f"updated: {view.updated_at.isoformat()} by {view.updated_by or '-'}")
    echo("values:")
    declared = {f.name for f in place.fields}
    for field in place.fields:
        if field.name in view.values:
            shown = view.values[field.name]
            text = shown if field.secret else json_text(shown, indent=None)
        elif field.has_default:
            text = f"(default {json_text(field.default, indent=None)})"
        else:
            text = "(not set)"
        echo(f"  {field.name} = {text}")
    for key, value in view.values.items():
        if key not in declared:
            echo(f"  {key} = {json_text(value, indent=None)} (not declared)")
    if view.problems:
        echo("needs update:")
        for key, problem in sorted(view.problems.items()):
            echo(f"  {key}: {problem}")


def _done(message: str, view: ConfigView | None, as_json: bool) -> None:
    if as_json and view is not None:
        _print_json(view.to_json())
    echo(message, err=True)


# ----------------------------------------------------------------- commands


@app.command("list")
def configs_list(
    project: ProjectArg,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """List the configurations: name, revision, the active one (*), those needing update."""
    target = _target(project, account, data_dir, database_url)
    views = target.service.list(target.place)
    if as_json:
        _print_json([v.to_json() for v in views])
        return
    width = max(len(v.name) for v in views)
    for view in views:
        line = f"{'*' if view.active else ' '} {view.name:<{width}}  revision {view.revision}"
        if view.needs_update:
            line += f"  needs update ({', '.join(sorted(view.problems))})"
        echo(line.rstrip())


@app.command("show")
def configs_show(
    project: ProjectArg,
    name: NameArg,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Show a configuration: its revision and values (secrets masked) and any problems."""
    target = _target(project, account, data_dir, database_url)
    view = target.service.show(target.place, name)
    if as_json:
        _print_json(view.to_json())
    else:
        _show_text(target.place, view)


@app.command("create")
def configs_create(
    project: ProjectArg,
    name: NameArg,
    assignments: AssignArgs = None,
    secret: SecretOpt = None,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create a configuration from FIELD=VALUE pairs (secrets: --secret FIELD, value on stdin)."""
    target = _target(project, account, data_dir, database_url)
    values = command_line_values(target.place, assignments or [], secret or [])
    view = target.service.create(target.place, name, values, _who())
    _done(f"created {view.name} (revision {view.revision}) in the {target.shown}", view, as_json)


@app.command("copy")
def configs_copy(
    project: ProjectArg,
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="The configuration to copy.")],
    new_name: Annotated[str, typer.Argument(metavar="NEW", help="The new configuration's name.")],
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Copy a configuration (secrets included) under a new name."""
    target = _target(project, account, data_dir, database_url)
    view = target.service.copy(target.place, source, new_name, _who())
    _done(f"copied {source} to {view.name} (revision {view.revision}) in the {target.shown}", view, as_json)


@app.command("set")
def configs_set(
    project: ProjectArg,
    name: NameArg,
    assignments: AssignArgs = None,
    revision: RevisionOpt = None,
    unset: Annotated[
        list[str] | None,
        typer.Option(
            "--unset", metavar="FIELD", help="Remove a field's value (repeatable).", show_default=False
        ),
    ] = None,
    secret: SecretOpt = None,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Change some values of a configuration, read at --revision N."""
    read = _need_revision(revision, project, name)
    target = _target(project, account, data_dir, database_url)
    values = command_line_values(target.place, assignments or [], secret or [], unset or [])
    if not values and not unset:
        raise ConfigError("nothing to change: give FIELD=VALUE, --secret FIELD or --unset FIELD")
    view = target.service.set(target.place, name, revision=read, values=values, unset=unset or [], who=_who())
    _done(f"updated {view.name}: revision {view.revision}", view, as_json)


@app.command("rename")
def configs_rename(
    project: ProjectArg,
    name: NameArg,
    new_name: Annotated[str, typer.Argument(metavar="NEW", help="The new name.")],
    revision: RevisionOpt = None,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Rename a configuration, read at --revision N."""
    read = _need_revision(revision, project, name)
    target = _target(project, account, data_dir, database_url)
    view = target.service.rename(target.place, name, new_name, revision=read, who=_who())
    _done(f"renamed {name} to {view.name} (revision {view.revision})", view, as_json)


@app.command("delete")
def configs_delete(
    project: ProjectArg,
    name: NameArg,
    revision: RevisionOpt = None,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Delete a configuration, read at --revision N (`default` stays)."""
    read = _need_revision(revision, project, name)
    target = _target(project, account, data_dir, database_url)
    target.service.delete(target.place, name, revision=read, who=_who())
    if as_json:
        _print_json({"name": name, "revision": read, "deleted": True})
    echo(f"deleted {name} from the {target.shown}", err=True)


@app.command("activate")
def configs_activate(
    project: ProjectArg,
    name: NameArg,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Make a configuration the active one of its scope (what tool calls use)."""
    target = _target(project, account, data_dir, database_url)
    view = target.service.activate(target.place, name, _who())
    _done(f"{view.name} is the active configuration of the {target.shown}", view, as_json)


@app.command("export")
def configs_export(
    project: ProjectArg,
    with_secrets: Annotated[
        bool, typer.Option("--with-secrets", help="Include secret values in clear (audited).")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write to FILE (default stdout).", show_default=False),
    ] = None,
    account: AccountOpt = None,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Export every configuration of the scope as one JSON document."""
    target = _target(project, account, data_dir, database_url)
    doc = target.service.export(target.place, secrets=with_secrets, who=_who())
    text = json_text(doc) + "\n"
    if output is None:
        echo(text, nl=False)
        return
    _write_file(output, text, private=with_secrets)
    note = " with secret values: keep it private (mode 0600)" if with_secrets else ""
    echo(f"exported {len(doc['configurations'])} configuration(s) to {output}{note}", err=True)


def _write_file(path: Path, text: str, *, private: bool) -> None:
    try:
        if private:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # an existing file keeps no wider mode
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--output {path}: {exc.strerror or exc}") from None


@app.command("import")
def configs_import(
    project: ProjectArg,
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="An export document ('-': stdin).")],
    mode: Annotated[
        str, typer.Option("--mode", metavar="merge|replace", help="replace deletes configurations not in it.")
    ] = "merge",
    force: Annotated[bool, typer.Option("--force", help="Overwrite despite revision conflicts.")] = False,
    account: AccountOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Import an export document: all or nothing, checked against today's fields."""
    if source == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        try:
            text, where = Path(source).read_text(encoding="utf-8"), source
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        doc = strict_json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationRefused(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # a duplicate key, NaN, nested too deep, too long
        raise ConfigurationRefused(f"{where}: not acceptable JSON ({exc})") from None
    target = _target(project, account, data_dir, database_url)
    views = target.service.import_(target.place, doc, mode=mode, force=force, who=_who())
    if as_json:
        _print_json([v.to_json() for v in views])
    active = next((v.name for v in views if v.active), "default")
    echo(
        f"imported into the {target.shown} ({mode}): {len(views)} configuration(s); active: {active}",
        err=True,
    )
