"""Several `steamharness serve` replicas behind HAProxy, as an operator runs them: each
replica with its own data dir, all sharing one database, secret key, shared dir and admin
key, and HAProxy started with deploy/haproxy.cfg itself (addresses from its environment
variables) on free loopback ports. Every process is stopped by its PID."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

from tests import processes
from tests.e2e.server import STEAMHARNESS, LiveServer, free_port, make_server
from tests.helpers import WAIT

ROOT = Path(__file__).resolve().parent.parent.parent
HAPROXY_CFG = ROOT / "deploy" / "haproxy.cfg"
START_TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)


def haproxy_binary() -> str:
    """Debian's haproxy (scripts/test installs it); a clear failure when it is missing."""
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None
    )
    if found is None:
        raise AssertionError(
            "HAProxy is not installed: the multi-replica tests run deploy/haproxy.cfg with Debian's "
            "haproxy (apt-get install haproxy; scripts/test installs it)"
        )
    return found


def replica_env(database_url: str, shared_dir: Path, lease_ttl: str = "3") -> dict[str, str]:
    """What every replica of one server shares."""
    return {
        "STEAMHARNESS_DATABASE_URL": database_url,
        "STEAMHARNESS_SECRET_KEY": secrets.token_urlsafe(48),
        "STEAMHARNESS_SHARED_DIR": str(shared_dir),
        "STEAMHARNESS_REPLICA_LEASE_TTL_SECONDS": lease_ttl,
    }


@dataclass
class HaProxy:
    """HAProxy in the foreground (`-db`) with deploy/haproxy.cfg, in front of `backends`."""

    backends: list[LiveServer]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mcp_url(self, project_id: str, target: str = "latest") -> str:
        return f"{self.base_url}/api/workflows/{project_id}/mcp?target={target}"

    def start(self) -> None:
        a, b = self.backends  # deploy/haproxy.cfg names two replicas
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "STEAMHARNESS_LB_BIND": f"127.0.0.1:{self.port}",
            "STEAMHARNESS_REPLICA_A": f"127.0.0.1:{a.port}",
            "STEAMHARNESS_REPLICA_B": f"127.0.0.1:{b.port}",
        }
        binary = haproxy_binary()
        check = processes.run(
            [binary, "-c", "-f", str(HAPROXY_CFG)], env=env, capture_output=True, timeout=30
        )
        if check.returncode != 0:
            raise AssertionError(
                f"haproxy refused {HAPROXY_CFG}:\n{check.stdout.decode()}{check.stderr.decode()}"
            )
        log = self.log_path.open("ab")
        self.proc = processes.Popen(
            [binary, "-db", "-f", str(HAPROXY_CFG)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        log.close()

    def wait_until_both_replicas_answer(self, replica_ids: set[str]) -> None:
        """Until /healthz through HAProxy was answered by every replica (its health checks see
        them up and round-robin reached each), bounded."""
        seen: set[str] = set()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"haproxy exited at start-up:\n{self.log()}")
            with contextlib.suppress(httpx2.HTTPError):
                r = httpx2.get(f"{self.base_url}/healthz", timeout=5)
                if r.status_code == 200:
                    seen.add(r.json()["replica"])
                    if seen >= replica_ids:
                        return
                    continue
            time.sleep(0.05)  # polling a proxy that is not routing yet, bounded by the deadline
        raise AssertionError(
            f"HAProxy did not reach both replicas within {START_TIMEOUT}s (saw {seen}):\n{self.log()}"
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def replica_id(server: LiveServer) -> str:
    r = httpx2.get(f"{server.base_url}/healthz", timeout=30)
    assert r.status_code == 200, r.text
    return str(r.json()["replica"])


@dataclass
class Cluster:
    a: LiveServer
    b: LiveServer
    lb: HaProxy
    shared: Path
    ids: dict[str, LiveServer]  # replica id → its server

    def id_of(self, server: LiveServer) -> str:
        return next(rid for rid, s in self.ids.items() if s is server)

    def other(self, rid: str) -> LiveServer:
        return next(s for r, s in self.ids.items() if r != rid)


@contextlib.contextmanager
def running_cluster(root: Path, database_url: str, *, lease_ttl: str = "3") -> Iterator[Cluster]:
    """Two replicas (separate data dirs) and HAProxy; everything stopped by PID at the end."""
    shared = root / "shared"
    env = replica_env(database_url, shared, lease_ttl)
    upgrade = processes.run(
        [STEAMHARNESS, "db", "upgrade", "--data-dir", str(root / "migrate")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("STEAMHARNESS_")}, **env},
    )
    assert upgrade.returncode == 0, upgrade.stderr  # as an operator does before starting replicas
    a = make_server(root / "a", **env)  # registers and publishes into the shared database and dir
    (root / "b").mkdir()
    b = LiveServer(
        data_dir=root / "b" / "data", projects=a.projects, port=free_port(), admin_key=a.admin_key, env=a.env
    )
    lb = HaProxy([a, b], log_path=root / "haproxy.log")
    with a.running(), b.running():
        ids = {replica_id(a): a, replica_id(b): b}
        assert len(ids) == 2
        try:
            lb.start()
            lb.wait_until_both_replicas_answer(set(ids))
            yield Cluster(a, b, lb, shared, ids)
        finally:
            lb.stop()
