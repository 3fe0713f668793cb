"""`steamharness login` never sends a key over plain http:// to another machine: the URL is
refused in one line before the key is read; https:// and http:// to loopback are allowed.
A saved login naming such a URL (written by hand or an older version) is refused too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import LiveServer, free_port
from tests.e2e.test_login import cli, login, one_error
from tests.support import in_process_server
from webui.auth.saved import plain_http_refusal, save_auth, saved_auth_env
from webui.errors import ConfigError

REFUSED = "plain http:// to another machine"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("login-http")) as live:
        yield live


@pytest.mark.parametrize(
    "url",
    [
        "http://sh.example.test",
        "http://sh.example.test:8000/",
        "HTTP://SH.EXAMPLE.TEST",
        "http://10.0.0.5:8000",
        "http://[2001:db8::1]:8000",
        "http://localhost.example.test",
        "http://127.0.0.1.example.test",
    ],
)
def test_plain_http_to_another_machine_is_refused_in_one_line_before_the_key_is_read(
    tmp_path: Path, url: str
) -> None:
    # An empty stdin: had the key been read first, the error would be "no key on stdin".
    line = one_error(cli("login", url, "--auth-dir", str(tmp_path / "auth"), stdin=""))
    assert REFUSED in line and "use https://" in line and "127.0.0.1, localhost or [::1]" in line
    assert not (tmp_path / "auth").exists()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_plain_http_to_loopback_gets_past_the_url_check(tmp_path: Path, host: str) -> None:
    # Nothing listens there: the login fails on reaching the server, not on the URL.
    url = f"http://{host}:{free_port()}"
    line = one_error(login(url, "shk_any_key", tmp_path / "auth", tmp_path / "data"))
    assert "cannot reach" in line and REFUSED not in line


def test_https_gets_past_the_url_check(tmp_path: Path) -> None:
    url = f"https://localhost:{free_port()}"
    line = one_error(login(url, "shk_any_key", tmp_path / "auth", tmp_path / "data"))
    assert "cannot reach" in line and REFUSED not in line


def test_a_login_over_http_to_localhost_is_checked_and_saved(server: LiveServer, tmp_path: Path) -> None:
    url = f"http://localhost:{server.port}"
    done = login(url, server.admin_key, tmp_path / "auth", tmp_path / "data")
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "auth" / "workflow-auth.json").read_text(encoding="utf-8"))
    assert saved == {"serverUrl": url, "apiKey": server.admin_key}


def test_a_saved_login_naming_plain_http_elsewhere_is_refused_not_handed_on(tmp_path: Path) -> None:
    saved = {"serverUrl": "http://sh.example.test", "apiKey": "shk_k1"}
    (tmp_path / "workflow-auth.json").write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        saved_auth_env(tmp_path)
    assert REFUSED in caught.value.message and "run steamharness login again" in caught.value.message
    with pytest.raises(ConfigError, match=REFUSED):
        save_auth(tmp_path / "other", server_url="http://sh.example.test", api_key="shk_k1")
    assert not (tmp_path / "other").exists()


def test_the_rule_allows_https_and_loopback_and_refuses_the_rest() -> None:
    allowed = [
        "https://sh.example.test",
        "http://127.0.0.1:8000",
        "http://127.8.9.10",
        "http://localhost",
        "http://LOCALHOST:1",
        "http://[::1]:8000",
    ]
    assert [plain_http_refusal(u) for u in allowed] == [None] * len(allowed)
    assert plain_http_refusal("http://192.168.1.2") is not None
