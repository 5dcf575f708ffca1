"""The running console's guards over real HTTP (the shipped `planloop console`): the Host
allow-list, the body limit (a huge body refused without being read), the caps on live streams
and one Redis reader per followed session, however many viewers it has."""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.integration.console_process import Console, console_process

pytestmark = pytest.mark.integration

WAITS = """
goal: waits for a person for as long as the test needs
steps:
  - {id: quote, tool: bench.echo, params: {value: 1}}
  - {id: order, tool: bench.echo, params: {value: 2}, dependencies: [quote],
     requires_approval: true}
"""
BIG = 200 * 1024 * 1024  # what the red-team sent: the console's RSS reached 705 MB
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def console(
    stack: Stack, env_overrides: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    extra = {"PLANLOOP_CONSOLE_STREAMS_PER_USER": "6", "PLANLOOP_CONSOLE_STREAMS_TOTAL": "50"}
    with console_process(env_overrides, tmp_path_factory.mktemp("guards"), extra) as running:
        yield running


@pytest.fixture(scope="module")
def waiting(console: Console, producer: Producer) -> Iterator[str]:
    """A session that waits for an approval nobody gives (cancelled at the end)."""
    sid = producer.submit(parse_plan(WAITS))
    wait_for(
        lambda: producer.state.steps(sid, ["order"])["order"].note == "awaiting approval",
        30,
        "the approval request",
    )
    yield sid
    producer.cancel(sid, "test over")


def basic(console: Console) -> str:
    token = base64.b64encode(f"{console.user}:{console.password}".encode()).decode()
    return f"Basic {token}"


def request(
    console: Console, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, bytes]:
    """(status, body) of one request with the console's credentials (``Host`` as given)."""
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Authorization": basic(console), **headers})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def get(console: Console, path: str, host: str | None = None) -> tuple[int, bytes]:
    return request(console, "GET", path, **({"Host": host} if host else {}))


def gauge(console: Console, name: str) -> float:
    text = get(console, "/metrics")[1].decode()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def refused_count(console: Console, reason: str) -> float:
    text = get(console, "/metrics")[1].decode()
    found = re.search(rf'^planloop_console_refused_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_only_the_names_the_console_is_known_by_are_served(
    console: Console, producer: Producer, waiting: str
) -> None:
    # DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its own name
    status, body = get(console, f"/api/sessions/{waiting}", host="evil.example")
    assert status == 400
    assert "PLANLOOP_CONSOLE_ALLOWED_HOSTS" in json.loads(body)["error"]
    assert get(console, "/", host=f"evil.example:{console.port}")[0] == 400
    before = len(producer.state.events(waiting, after="-"))
    status, _ = request(
        console,
        "POST",
        f"/api/sessions/{waiting}/signal",
        json.dumps({"text": "sent through a rebound name"}).encode(),
        Host="evil.example",
        **{"Content-Type": "application/json"},
    )
    assert status == 400
    for host in (f"localhost:{console.port}", f"127.0.0.1:{console.port}", "[::1]"):
        assert get(console, f"/api/sessions/{waiting}", host=host)[0] == 200, host
    assert len(producer.state.events(waiting, after="-")) == before  # no signal appended


def send_until_refused(console: Console, head: bytes, chunks: Iterator[bytes]) -> tuple[int, int]:
    """Send ``head`` then ``chunks`` until the console answers; (status, bytes sent)."""
    sock = socket.create_connection(("127.0.0.1", console.port), timeout=30)
    sent = 0
    try:
        sock.sendall(head)
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break  # the console answered and closed: it reads no more
            sent += len(chunk)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    answer = b""
    try:
        while b"\r\n" not in answer:
            data = sock.recv(4096)
            if not data:
                break
            answer += data
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    status = int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1") else 0
    return status, sent


def test_a_huge_body_is_refused_without_being_read(console: Console, waiting: str) -> None:
    baseline = console.rss_peak_kib()
    path = f"/api/sessions/{waiting}/signal"
    auth = basic(console)
    declared = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {BIG}\r\n\r\n"
    ).encode()
    status, sent = send_until_refused(console, declared, (b"x" * MiB for _ in range(200)))
    assert status == 413
    assert sent < BIG // 2  # refused on the header: the rest was never read

    chunked = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n%s\r\n" % (MiB, b"y" * MiB)
    status, sent = send_until_refused(console, chunked, (chunk for _ in range(200)))
    assert status == 413
    assert sent < BIG // 2  # cut off once past the limit (1 MiB)
    grown_mib = (console.rss_peak_kib() - baseline) / 1024
    assert grown_mib < 40, f"the console's peak RSS grew {grown_mib:.0f} MiB"
    assert refused_count(console, "body_size") >= 2
    # a body within the limit still goes through
    signal = json.dumps({"text": "a normal signal"}).encode()
    ok, _ = request(console, "POST", path, signal, **{"Content-Type": "application/json"})
    assert ok == 200


def open_stream(console: Console, sid: str) -> tuple[http.client.HTTPConnection, int, bytes]:
    """A live stream: (its connection, the status, its first line or the refusal's body)."""
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    conn.request("GET", f"/api/sessions/{sid}/stream", headers={"Authorization": basic(console)})
    answer = conn.getresponse()
    if answer.status != 200:
        body = answer.read()
        conn.close()
        return conn, answer.status, body
    return conn, answer.status, answer.readline()


def test_viewers_of_a_session_share_one_reader_and_each_user_is_capped(
    console: Console, producer: Producer, waiting: str
) -> None:
    other = producer.submit(parse_plan(WAITS))
    streams = []
    try:
        for _ in range(5):
            conn, status, first = open_stream(console, waiting)
            assert (status, first) == (200, b"event: plan\n")  # joined: the state so far
            streams.append(conn)
        wait_for(lambda: gauge(console, "planloop_console_streams") == 5, 10, "5 streams")
        assert gauge(console, "planloop_console_stream_readers") == 1
        conn, status, _ = open_stream(console, other)
        streams.append(conn)
        assert status == 200
        wait_for(lambda: gauge(console, "planloop_console_stream_readers") == 2, 10, "2 readers")

        _, status, body = open_stream(console, waiting)  # a 7th for the same user
        assert status == 429
        assert "PLANLOOP_CONSOLE_STREAMS_PER_USER" in json.loads(body)["error"]
        assert refused_count(console, "stream_cap") >= 1
    finally:
        for conn in streams:
            conn.close()
        producer.cancel(other, "test over")
    # closed tabs give their slots and, with the last viewer, the reader back
    wait_for(lambda: gauge(console, "planloop_console_streams") == 0, 10, "slots given back")
    wait_for(lambda: gauge(console, "planloop_console_stream_readers") == 0, 10, "no reader")
    conn, status, _ = open_stream(console, waiting)
    conn.close()
    assert status == 200


def test_the_console_caps_streams_in_all(
    stack: Stack, env_overrides: dict[str, str], producer: Producer, waiting: str, tmp_path: Path
) -> None:
    extra = {"PLANLOOP_CONSOLE_STREAMS_PER_USER": "5", "PLANLOOP_CONSOLE_STREAMS_TOTAL": "2"}
    with console_process(env_overrides, tmp_path, extra) as capped:
        first, _, _ = open_stream(capped, waiting)
        second, _, _ = open_stream(capped, waiting)
        _, status, body = open_stream(capped, waiting)
        first.close()
        second.close()
    assert status == 429
    assert "PLANLOOP_CONSOLE_STREAMS_TOTAL" in json.loads(body)["error"]
