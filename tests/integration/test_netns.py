"""The namespace machinery of the multi-host test: hosts reach each other over the switch
while linked and not while cut, nothing routes outside the switch, and ``destroy`` leaves
no namespace and no process behind."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import wait_for
from tests.integration import netns
from tests.integration.netns import SUBNET, Host, Network

pytestmark = pytest.mark.integration

PORT = 7007
# A TCP server that accepts connections until it is killed.
SERVER = """
import socket, sys
s = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    s.accept()[0].close()
"""
CONNECT = """
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
"""


@pytest.fixture
def network() -> Iterator[Network]:
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"needs network namespaces: {reason}")
    net = Network.create(f"pl{uuid.uuid4().hex[:6]}")
    try:
        yield net
    finally:
        net.destroy()


def reaches(client: Host, server: Host, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection from ``client`` to ``server``'s listener succeeds."""
    done = subprocess.run(
        [*client.prefix, sys.executable, "-c", CONNECT, server.address, str(PORT), str(timeout_s)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return done.returncode == 0


def test_hosts_reach_each_other_only_while_linked(network: Network) -> None:
    a, b = network.add_host("a"), network.add_host("b")
    server = subprocess.Popen([*a.prefix, sys.executable, "-c", SERVER, a.address, str(PORT)])
    try:
        wait_for(lambda: reaches(b, a), 30, "the server on host a")

        network.cut(a)
        assert not reaches(b, a), "host a answered with its link cut"

        network.restore(a)
        wait_for(lambda: reaches(b, a), 30, "host a again once its link is back")
    finally:
        server.kill()
        server.wait(10)


def test_nothing_routes_outside_the_switch(network: Network) -> None:
    host = network.add_host("a")
    routes = subprocess.run(
        ["ip", "-n", host.netns, "route", "show"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # Only the switch's own /24, on the host's link: no default route, no way out.
    assert [r.split()[:3] for r in routes] == [[f"{SUBNET}.0/24", "dev", netns.LINK]], routes
    root = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True)
    assert f"{SUBNET}." not in root.stdout, "the root namespace got an address on the switch"


def test_destroy_leaves_no_namespace_and_no_process(network: Network) -> None:
    host = network.add_host("a")
    sleeper = subprocess.Popen([*host.prefix, "sleep", "600"])
    names = [host.netns, network.switch]
    # Popen returns before `ip netns exec` has entered the namespace; a process that is not
    # in it yet is not the namespace's to kill.
    deadline = time.monotonic() + 10
    while sleeper.pid not in netns.namespace_pids(host.netns):
        assert time.monotonic() < deadline, "the sleeper never entered its namespace"
        time.sleep(0.02)

    network.destroy()

    assert sleeper.wait(10) == -9  # SIGKILLed by destroy
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert not [n for n in names if n in listed.stdout], listed.stdout
