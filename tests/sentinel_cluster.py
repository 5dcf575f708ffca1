"""A Redis Sentinel deployment on loopback for tests: a master, one replica, three sentinels.

Every server is the same ``redis-server`` binary (sentinels run it with ``--sentinel``), on
free ports, with its files in one temporary directory; :meth:`SentinelCluster.stop` ends
them all. Failure detection is quick (``down-after-milliseconds 1000``), so a killed master
is replaced within a few seconds. With ``tls`` (a certificate, its key and the CA that
signed it), every server listens on TLS only (``port 0``, ``tls-port``), replicates and
monitors over TLS, and the cluster's own clients verify the servers' certificates.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from planloop.producer.stack import free_port, redis_server_binary

MASTER_NAME = "m"
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
START_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class TlsFiles:
    """A server certificate and key, and the CA file that verifies it (PEM paths)."""

    cert: Path
    key: Path
    ca: Path

    def server_args(self) -> list[str]:
        return [
            *("--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key)),
            *("--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no"),
            *("--tls-replication", "yes"),
        ]

    def sentinel_conf(self) -> str:
        return (
            f"tls-cert-file {self.cert}\ntls-key-file {self.key}\ntls-ca-cert-file {self.ca}\n"
            "tls-auth-clients no\ntls-replication yes\n"
        )

    def client_kwargs(self) -> dict[str, Any]:
        return {"ssl": True, "ssl_ca_certs": str(self.ca), "ssl_cert_reqs": "required"}


@dataclass
class Server:
    """One redis-server process of the cluster."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    tls: TlsFiles | None = None

    def client(self) -> redis.Redis:
        extra = self.tls.client_kwargs() if self.tls is not None else {}
        return redis.Redis("127.0.0.1", self.port, socket_timeout=2, decode_responses=True, **extra)

    def answers(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


@dataclass
class SentinelCluster:
    """A master, a replica (``replicaof`` the master) and three sentinels monitoring them."""

    binary: str = field(default_factory=redis_server_binary)
    directory: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="planloop-sentinel-"))
    )
    data: list[Server] = field(default_factory=list)  # [master, replica] as started
    sentinels: list[Server] = field(default_factory=list)
    tls: TlsFiles | None = None

    @property
    def url(self) -> str:
        """PLANLOOP_REDIS_URL in kombu's form (with PLANLOOP_REDIS_SENTINEL_MASTER=m)."""
        return ";".join(f"sentinel://127.0.0.1:{s.port}" for s in self.sentinels) + "/0"

    def start(self) -> SentinelCluster:
        master = self._server("master", [])
        self.data.append(master)
        self._wait(master.answers, "the master")
        replica = self._server("replica", ["--replicaof", "127.0.0.1", str(master.port)])
        self.data.append(replica)
        self._wait(lambda: self._linked(replica), "the replica's sync")
        for i in range(3):
            self.sentinels.append(self._sentinel(i, master.port))
        for s in self.sentinels:
            self._wait(s.answers, f"sentinel {s.name}")
        self._wait(self._sentinels_agree, "the sentinels to see the replica and each other")
        return self

    def master_port(self) -> int | None:
        """The master's port as a sentinel that answers reports it."""
        for s in self.sentinels:
            client = s.client()
            try:
                reply = client.sentinel_get_master_addr_by_name(MASTER_NAME)
                if reply:
                    return int(reply[1])
            except redis.RedisError:
                continue
            finally:
                client.close()
        return None

    def role(self, port: int) -> str | None:
        """``master`` or ``slave``, as the data server on ``port`` says; None when silent."""
        server = next(s for s in self.data if s.port == port)
        client = server.client()
        try:
            return str(client.info("replication").get("role"))
        except redis.RedisError:
            return None
        finally:
            client.close()

    def master(self) -> Server:
        port = self.master_port()
        return next(s for s in self.data if s.port == port)

    def kill_master(self) -> Server:
        """SIGKILL the current master (no shutdown, nothing saved); the killed server."""
        server = self.master()
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(5)
        return server

    def stop(self) -> None:
        for server in [*self.sentinels, *self.data]:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _server(self, name: str, extra: list[str]) -> Server:
        port = free_port()
        folder = self.directory / name
        folder.mkdir()
        listen = ["--port", str(port)]
        if self.tls is not None:
            listen = ["--port", "0", "--tls-port", str(port), *self.tls.server_args()]
        args = [self.binary, *listen, "--bind", "127.0.0.1", "--dir", str(folder)]
        args += ["--save", "", "--appendonly", "no", *extra]
        return Server(name, port, self._popen(args, folder), self.tls)

    def _sentinel(self, index: int, master_port: int) -> Server:
        port = free_port()
        folder = self.directory / f"sentinel{index}"
        folder.mkdir()
        conf = folder / "sentinel.conf"  # a sentinel rewrites its config file: one each
        listen = f"port {port}\n"
        if self.tls is not None:
            listen = f"port 0\ntls-port {port}\n{self.tls.sentinel_conf()}"
        conf.write_text(
            f"{listen}bind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        process = self._popen([self.binary, str(conf), "--sentinel"], folder)
        return Server(f"{index}", port, process, self.tls)

    def _popen(self, args: list[str], folder: Path) -> subprocess.Popen[bytes]:
        with (folder / "log.txt").open("wb") as log:  # the child keeps its own copy
            return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=folder)

    def _linked(self, replica: Server) -> bool:
        client = replica.client()
        try:
            return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _sentinels_agree(self) -> bool:
        for s in self.sentinels:
            client = s.client()
            try:
                state = client.sentinel_master(MASTER_NAME)
                if (
                    int(state.get("num-slaves", 0)) < 1
                    or int(state.get("num-other-sentinels", 0)) < 2
                ):
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        return True

    def _wait(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if callable(ready) and ready():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sentinel cluster: {what} not ready in {START_TIMEOUT_S:.0f} s")
