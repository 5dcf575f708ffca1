"""Hosts for multi-host tests: Linux network namespaces on a private switch, and services in them.

A :class:`Network` is one switch namespace holding a bridge, plus one namespace per host,
each joined to the bridge by a veth pair and given an address of ``SUBNET``. Nothing is
added to the root namespace: no address, no route, no link, so the test can reach nothing
outside its own hosts and nothing outside can reach them. Every namespace name starts with
the network's run id, so parallel runs cannot collide; links and addresses live inside the
run's own namespaces, so they cannot collide either.

The test process itself stays in the root namespace and talks to the services of its hosts
through their Unix sockets (filesystem paths, which namespaces share): see
:func:`start_redis` and :func:`start_postgres`.

    net = Network.create("pl1a2b3c")
    data = net.add_host("data")             # namespace pl1a2b3c-data, address 10.213.0.2
    subprocess.Popen([*data.prefix, "redis-server", ...])
    net.cut(data); ...; net.restore(data)   # its link on the switch down, then up
    net.destroy()                           # kills what still runs inside, deletes it all
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

# A /24 that exists only inside one run's namespaces (each run has its own switch, so two
# runs may use the same addresses); the switch itself has none.
SUBNET = "10.213.0"
BRIDGE = "br0"  # inside the switch namespace
LINK = "eth0"  # a host's end of its veth pair, inside the host's namespace


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here (None when they can).

    Tried for real: a probe namespace with a bridge and a veth pair is created and deleted,
    so a container that lacks the capability or the kernel modules says so up front.
    """
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); this test runs as a normal user"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to create network namespaces"
    probe = f"plprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except NetnsError as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        _ip("-n", probe, "link", "add", "name", BRIDGE, "type", "bridge")
        _ip("-n", probe, "link", "add", "name", "a", "type", "veth", "peer", "name", "b")
    except NetnsError as exc:
        return f"cannot create a bridge or a veth pair in a network namespace: {exc}"
    finally:
        with suppress(NetnsError):
            _ip("netns", "delete", probe)
    return None


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message holds the command and what it printed."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` exited {done.returncode}: {done.stderr.strip()}")


@dataclass(frozen=True)
class Host:
    """One host: a namespace with a link to the switch and one address."""

    name: str  # its role in the test, e.g. "data"
    netns: str  # the namespace, "<run id>-<name>"
    address: str  # its address on the switch
    port: str  # its link's name on the switch side

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a program on this host."""
        return ["ip", "netns", "exec", self.netns]


@dataclass
class Network:
    """A switch namespace with a bridge, and the hosts plugged into it."""

    run_id: str
    hosts: list[Host] = field(default_factory=list)
    destroyed: bool = False

    @property
    def switch(self) -> str:
        return f"{self.run_id}-switch"

    @classmethod
    def create(cls, run_id: str) -> Network:
        net = cls(run_id)
        _ip("netns", "add", net.switch)
        try:
            _ip("-n", net.switch, "link", "add", "name", BRIDGE, "type", "bridge")
            _ip("-n", net.switch, "link", "set", BRIDGE, "up")
        except NetnsError:
            net.destroy()
            raise
        return net

    def add_host(self, name: str) -> Host:
        """A new host on the switch, at the next address (.2, .3, ...)."""
        host = Host(
            name=name,
            netns=f"{self.run_id}-{name}",
            address=f"{SUBNET}.{len(self.hosts) + 2}",
            port=f"p-{name}"[:15],  # interface names are at most 15 bytes
        )
        _ip("netns", "add", host.netns)
        self.hosts.append(host)  # from here on destroy() removes it
        _ip(
            "link", "add", "name", LINK, "netns", host.netns, "type", "veth",
            "peer", "name", host.port, "netns", self.switch,
        )  # fmt: skip
        _ip("-n", self.switch, "link", "set", host.port, "master", BRIDGE, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", LINK)
        _ip("-n", host.netns, "link", "set", LINK, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        return host

    def cut(self, host: Host) -> None:
        """Unplug ``host``: its port on the switch goes down, so its own link loses carrier
        and every packet to or from it is lost, as when a cable is pulled. Its processes,
        addresses and open connections stay; TCP retransmits once :meth:`restore` runs."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def restore(self, host: Host) -> None:
        """Plug ``host`` back in."""
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def destroy(self) -> None:
        """Kill what still runs in the hosts (only this run's processes live there), then
        delete every namespace; deleting one removes its links. Errors are collected and
        raised at the end, so one failure does not leave the rest behind. Once is enough:
        a second call does nothing."""
        if self.destroyed:
            return
        self.destroyed = True
        errors: list[str] = []
        for host in self.hosts:
            kill_namespace_processes(host.netns)
        for netns in [h.netns for h in self.hosts] + [self.switch]:
            try:
                _ip("netns", "delete", netns)
            except NetnsError as exc:
                errors.append(str(exc))
        self.hosts.clear()
        if errors:
            raise NetnsError("; ".join(errors))


def namespace_pids(netns: str) -> list[int]:
    done = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30, check=False
    )
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def kill_namespace_processes(netns: str, timeout_s: float = 10) -> None:
    """SIGKILL every process in ``netns`` and wait (with a deadline) until none is left."""
    deadline = time.monotonic() + timeout_s
    while (pids := namespace_pids(netns)) and time.monotonic() < deadline:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


@dataclass
class Service:
    """A server process on a host, and the Unix socket the test process reaches it through."""

    process: subprocess.Popen[bytes]
    url: str  # for the hosts: over the switch
    local_url: str  # for the test process in the root namespace: over the Unix socket
    stop_signal: int = signal.SIGTERM  # PostgreSQL: SIGINT, a fast shutdown

    def stop(self, timeout_s: float = 15) -> None:
        """Stop the server (its whole process group if it does not stop in time)."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.process.pid, self.stop_signal)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def _start(host: Host, args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*host.prefix, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def start_redis(host: Host, binary: str, directory: Path, port: int = 6379) -> Service:
    """A redis-server bound to ``host``'s address (and a Unix socket in ``directory``)."""
    sock = directory / "redis.sock"
    process = _start(
        host,
        [
            binary, "--bind", host.address, "--port", str(port),
            "--unixsocket", str(sock), "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", str(directory),
            # Protected mode admits loopback only; the hosts come over the private switch.
            "--protected-mode", "no",
        ],
        directory / "redis.log",
    )  # fmt: skip
    return Service(process, f"redis://{host.address}:{port}/0", f"unix://{sock}?db=0")


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL server programs (initdb, postgres), the newest installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return found[-1].parent if found else None


def start_postgres(host: Host, directory: Path, user: str = "postgres") -> Service:
    """A PostgreSQL cluster of its own in ``directory``, run as ``user``, listening on
    ``host``'s address with trust for ``SUBNET`` and on a Unix socket in ``directory``.

    The record is throw-away, so durability is off (fsync and friends): it is not what the
    test measures. Raises NetnsError when the programs are missing or initdb fails.
    """
    bindir = postgres_bin()
    if bindir is None:
        raise NetnsError("no PostgreSQL server programs under /usr/lib/postgresql/*/bin")
    as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
    shutil.chown(directory, user, user)
    data = directory / "pgdata"
    done = subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
         "--no-sync"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise NetnsError(f"initdb exited {done.returncode}: {done.stderr.strip()[-500:]}")
    with open(data / "pg_hba.conf", "a") as hba:
        hba.write(f"host all all {SUBNET}.0/24 trust\n")
    process = _start(
        host,
        [
            *as_user, str(bindir / "postgres"), "-D", str(data),
            "-c", f"listen_addresses={host.address}",
            "-c", f"unix_socket_directories={directory}",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=200",
        ],
        directory / "postgres.log",
    )  # fmt: skip
    return Service(
        process,
        f"postgresql+psycopg://postgres@{host.address}:5432/postgres",
        f"postgresql+psycopg://postgres@/postgres?host={directory}",
        # SIGTERM would wait for every client to leave; SIGINT disconnects them.
        stop_signal=signal.SIGINT,
    )
