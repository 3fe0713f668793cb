"""`steamharness login` to plain http:// on loopback sends the key straight to this machine,
never through a proxy named in the environment (HTTP_PROXY, ALL_PROXY): a plain-HTTP proxy
receives the whole request, Authorization header included, and is usually another machine,
which is exactly what refusing plain http:// elsewhere is for."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.e2e.server import free_port
from webui.cli.login import ServerUnreachable, check_key

KEY = "shk_proxy_must_not_see_this"


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """A 'proxy' on loopback that records what it is sent and answers 502."""
    seen: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    seen.append(conn.recv(65536))
                    conn.sendall(
                        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    address = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, address)
    try:
        yield seen
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_loopback_login_over_plain_http_bypasses_the_environments_proxy(
    proxy: list[bytes], host: str
) -> None:
    # Nothing listens on the target: the key goes nowhere, and the proxy sees nothing.
    with pytest.raises(ServerUnreachable):
        check_key(f"http://{host}:{free_port()}", KEY)
    assert not any(KEY.encode() in got for got in proxy)
    assert proxy == []
