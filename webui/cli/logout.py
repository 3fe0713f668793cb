"""`steamharness logout`: forget the login `steamharness login` saved (workflow-auth.json)."""

from __future__ import annotations

from webui.cli.common import DataDirOpt, echo
from webui.cli.login import AuthDirOpt, auth_dir_of


def logout_command(auth_dir: AuthDirOpt = None, data_dir: DataDirOpt = None) -> None:
    """Remove the saved server URL and key."""
    from webui.auth.saved import auth_path, remove_auth

    folder = auth_dir_of(data_dir, auth_dir)
    url = remove_auth(folder)
    if url is None:
        echo(f"not logged in: there is no {auth_path(folder)}")
        return
    echo(f"logged out{f' of {url}' if url else ''}: removed {auth_path(folder)}")
