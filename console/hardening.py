"""What keeps a browser from being turned against the console: headers that forbid framing
and foreign scripts on every response, a Host allow-list, and a bound on request bodies.

- Framing (clickjacking): ``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'``; the
  CSP also allows only the console's own script and style files (the pages ship no inline
  code), so markup that slipped into a rendered field could not run.
- DNS rebinding: a page on ``evil.example`` whose name resolves to 127.0.0.1 reaches the
  console with ``Host: evil.example``; only the names the console is known by are served.
- Bodies: a ``Content-Length`` over the limit is refused before a byte is read; a chunked
  body is counted as the app reads it and cut off once it passes the limit.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from planloop.core import metrics

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: with no-referrer a POST may carry "Origin: null",
    # which the Origin check refuses
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    # another site cannot load the JSON endpoints as an <img> or <script> (no-cors reads)
    (b"cross-origin-resource-policy", b"same-origin"),
)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_ADDRESSES = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names, not a bind


class BodyTooLargeError(Exception):
    """A chunked body passed the limit while the app read it (caught by :class:`Hardening`)."""


def host_name(header: str) -> str:
    """The name of a Host header, without port or IPv6 brackets, lower-case."""
    text = header.strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    if text.count(":") > 1:  # a bare IPv6 address, which a Host header should not carry
        return text
    return text.partition(":")[0].rstrip(".")


def allowed_hosts(bound_address: str, public_names: Iterable[str]) -> frozenset[str]:
    """The Host names served: loopback, the bound address (unless a wildcard), the setting's."""
    names = set(LOOPBACK_NAMES) | {host_name(n) for n in public_names if n.strip()}
    if bound_address not in WILDCARD_ADDRESSES:
        names.add(host_name(f"[{bound_address}]" if _is_ipv6(bound_address) else bound_address))
    return frozenset(names)


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


async def refuse(send: Send, status: int, message: str, *, close: bool = False) -> None:
    """A JSON error with the security headers (``close``: the connection is not reused, so the
    unread rest of a body is never read)."""
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Hardening:
    """ASGI middleware, outermost: Host check, body limit, security headers on every answer."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str], max_body_bytes: int) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if host_name(headers.get("host", "")) not in self.hosts:
            metrics.CONSOLE_REFUSED.labels("host").inc()
            await refuse(send, 400, "unknown Host: add it to PLANLOOP_CONSOLE_ALLOWED_HOSTS")
            return
        if _declared_length(headers) > self.max_body_bytes:
            metrics.CONSOLE_REFUSED.labels("body_size").inc()
            await refuse(send, 413, self._too_large(), close=True)
            return
        started = False

        async def send_hardened(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] in (401, 403):  # whatever authentication said no
                    metrics.CONSOLE_REFUSED.labels(f"status_{message['status']}").inc()
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, self._counting(receive), send_hardened)
        except BodyTooLargeError:
            metrics.CONSOLE_REFUSED.labels("body_size").inc()
            if not started:
                await refuse(send, 413, self._too_large(), close=True)

    def _too_large(self) -> str:
        return (
            f"the request body is over {self.max_body_bytes} bytes "
            "(PLANLOOP_CONSOLE_MAX_BODY_BYTES)"
        )

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLargeError
            return message

        return counted


def _declared_length(headers: Headers) -> int:
    try:
        return int(headers.get("content-length") or 0)
    except ValueError:
        return 0  # h11/httptools refuse a malformed length before the app sees it
