"""The counting parts of bench/redis_cost.py: the relay's round trips and bytes, per-step math."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from bench.redis_cost import Cost, chain_plan, wide_plan
from bench.wire_counter import WireCounter

REPLY = b"+OK\r\n"


class LineServer(socketserver.BaseRequestHandler):
    """Answers each line it reads with ``+OK``, as Redis answers each command."""

    def handle(self) -> None:
        pending = b""
        while data := self.request.recv(4096):
            pending += data
            lines = pending.count(b"\n")
            pending = pending.rsplit(b"\n", 1)[-1]
            self.request.sendall(REPLY * lines)


@pytest.fixture
def relay() -> Iterator[WireCounter]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), LineServer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    counter = WireCounter("127.0.0.1", server.server_address[1]).start()
    try:
        yield counter
    finally:
        counter.stop()
        server.shutdown()
        server.server_close()


def exchange(sock: socket.socket, request: bytes, replies: int) -> None:
    sock.sendall(request)
    expected, got = REPLY * replies, b""
    while len(got) < len(expected):
        got += sock.recv(4096)
    assert got == expected


def test_a_pipeline_is_one_round_trip_and_every_byte_is_counted(relay: WireCounter) -> None:
    with socket.create_connection(("127.0.0.1", relay.port)) as sock:
        exchange(sock, b"PING\r\n", 1)
        exchange(sock, b"SET a 1\r\nGET a\r\nDEL a\r\n", 3)
        exchange(sock, b"PING\r\n", 1)
    counts = relay.snapshot()
    assert counts.round_trips == 3
    assert counts.bytes_in == len(b"PING\r\n" * 2 + b"SET a 1\r\nGET a\r\nDEL a\r\n")
    assert counts.bytes_out == len(REPLY) * 5
    assert counts.connections == 1


def test_reset_starts_the_counts_over(relay: WireCounter) -> None:
    with socket.create_connection(("127.0.0.1", relay.port)) as sock:
        exchange(sock, b"PING\r\n", 1)
        relay.reset()
        exchange(sock, b"PING\r\n", 1)
    assert relay.snapshot().round_trips == 1


def test_per_step_figures_divide_by_the_steps() -> None:
    cost = Cost("c", steps=50, seconds=1.0, commands=600, round_trips=200, bytes=250_000,
                relay_bytes=250_000)  # fmt: skip
    assert cost.per_step() == {"commands": 12.0, "round_trips": 4.0, "kb": 5.0}


def test_the_plans_have_the_shapes_they_are_named_for() -> None:
    chain, wide = chain_plan(5), wide_plan(5)
    assert [s.dependencies for s in chain.steps] == [[], ["s0"], ["s1"], ["s2"], ["s3"]]
    assert [s.dependencies for s in wide.steps] == [[], ["root"], ["root"], ["root"], ["root"]]
