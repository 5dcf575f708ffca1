"""The console's browser hardening without services: headers, Host allow-list, body limit,
stream slots and the live hub's replay for late viewers."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from planloop.console.hardening import Hardening, allowed_hosts, host_name
from planloop.console.live_hub import MAX_BACKLOG, Seen, Viewer
from planloop.console.stream_slots import StreamSlots, user_of

LIMIT = 4096


async def echo_length(request: Request) -> Response:
    return JSONResponse({"read": len(await request.body())})


def hello(_request: Request) -> Response:
    return PlainTextResponse("hello")


def hardened(hosts: frozenset[str] | None = None) -> TestClient:
    app = Starlette(
        routes=[Route("/", hello), Route("/body", echo_length, methods=["POST"])],
        middleware=[
            Middleware(
                Hardening,
                hosts=hosts or allowed_hosts("127.0.0.1", ["console.example.com"]),
                max_body_bytes=LIMIT,
            )
        ],
    )
    return TestClient(app, base_url="http://127.0.0.1:8765")


def test_every_answer_forbids_framing_and_foreign_scripts() -> None:
    http = hardened()
    for answer in (http.get("/"), http.get("/nowhere"), http.get("/", headers={"Host": "x.y"})):
        assert answer.headers["x-frame-options"] == "DENY"
        csp = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert answer.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8765", "localhost", "LOCALHOST:1", "[::1]:8765", "console.example.com"],
)
def test_known_hosts_are_served(host: str) -> None:
    assert hardened().get("/", headers={"Host": host}).text == "hello"


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "", "[::2]"]
)
def test_other_hosts_are_refused(host: str) -> None:
    answer = hardened().get("/", headers={"Host": host})
    assert answer.status_code == 400
    assert "PLANLOOP_CONSOLE_ALLOWED_HOSTS" in answer.json()["error"]


def test_the_bound_address_is_a_known_host_unless_a_wildcard() -> None:
    assert "10.0.0.5" in allowed_hosts("10.0.0.5", [])
    assert "fd00::1" in allowed_hosts("fd00::1", [])
    assert allowed_hosts("0.0.0.0", []) == frozenset({"localhost", "127.0.0.1", "::1"})
    assert host_name("[fd00::1]:80") == "fd00::1"
    assert host_name("Example.COM.:443") == "example.com"


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    answer = hardened().post("/body", content=b"x" * (LIMIT + 1))
    assert answer.status_code == 413
    assert answer.headers["connection"] == "close"
    assert "PLANLOOP_CONSOLE_MAX_BODY_BYTES" in answer.json()["error"]
    assert hardened().post("/body", content=b"x" * LIMIT).json() == {"read": LIMIT}


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit() -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(1000):
            sent += 1
            yield b"y" * 1024

    answer = hardened().post("/body", content=chunks())
    assert answer.status_code == 413
    small = hardened().post("/body", content=iter([b"z" * 100, b"z" * 100]))
    assert small.json() == {"read": 200}


def auth(user: str) -> dict[str, bytes]:
    value = "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()
    return {"type": "http", "headers": [(b"authorization", value.encode())]}  # type: ignore[dict-item]


def test_the_user_is_the_auth_middlewares_else_the_basic_auth_name() -> None:
    assert user_of({**auth("ann"), "planloop.user": "bob"}) == "bob"
    assert user_of(auth("ann")) == "ann"
    assert user_of({"type": "http", "headers": []}) == "-"


def test_stream_slots_cap_each_user_and_everyone() -> None:
    slots = StreamSlots(per_user=2, total=3)
    slots.take("ann")
    slots.take("ann")
    refusal = slots.refusal("ann")
    assert refusal is not None
    assert "PLANLOOP_CONSOLE_STREAMS_PER_USER" in refusal
    assert slots.refusal("bob") is None
    slots.take("bob")
    refusal = slots.refusal("cid")
    assert refusal is not None
    assert "PLANLOOP_CONSOLE_STREAMS_TOTAL" in refusal
    slots.give_back("ann")
    assert slots.refusal("cid") is None
    assert slots.refusal("ann") is None


def test_a_late_viewer_is_first_sent_what_the_feed_has_seen() -> None:
    seen = Seen()
    seen.add("plan", {"version": 1})
    seen.add("steps", {"a": {"status": "running"}, "b": {"status": "pending"}})
    seen.add("events", {"events": [{"id": "1-0"}]})
    seen.add("steps", {"a": {"status": "completed"}})
    seen.add("events", {"events": [{"id": "2-0"}]})
    seen.add("session", {"status": "running", "awaiting": ""})
    assert seen.replay() == [
        ("plan", {"version": 1}),
        ("steps", {"a": {"status": "completed"}, "b": {"status": "pending"}}),
        ("events", {"events": [{"id": "1-0"}, {"id": "2-0"}]}),
        ("session", {"status": "running", "awaiting": ""}),
    ]


def test_a_viewer_too_far_behind_is_dropped() -> None:
    viewer = Viewer()
    viewer.give([("steps", {})] * MAX_BACKLOG)
    assert not viewer.dropped
    viewer.give([("steps", {})])
    assert viewer.dropped
    assert viewer.take() == []
