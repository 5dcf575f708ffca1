"""The console's guard (basic auth, same-origin actions): no services."""

from __future__ import annotations

import base64

from starlette.requests import Request

from planloop.console.guard import basic_credentials, same_origin


def basic(value: str) -> str:
    return "Basic " + base64.b64encode(value.encode()).decode()


def test_basic_credentials_are_read_from_the_header_only_when_well_formed() -> None:
    assert basic_credentials(basic("ada:pa:ss")) == ("ada", "pa:ss")
    assert basic_credentials(basic("no-colon")) is None
    assert basic_credentials("Basic !!!not-base64") is None
    assert basic_credentials("Bearer x") is None
    assert basic_credentials(None) is None


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": raw, "scheme": "http"}
    scope["server"] = ("127.0.0.1", 8765)
    return Request(scope)


def test_an_action_from_another_origin_is_refused() -> None:
    assert same_origin(request({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8765"}))
    assert same_origin(request({"host": "127.0.0.1:8765"}))  # a script: no Origin
    assert not same_origin(request({"host": "127.0.0.1:8765", "origin": "http://evil.test"}))
    assert not same_origin(request({"host": "127.0.0.1:8765", "origin": "null"}))
    assert not same_origin(request({"host": "127.0.0.1:8765", "origin": "https://127.0.0.1:8765"}))
