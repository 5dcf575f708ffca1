"""Who may use the console: a user with a role on every page (basic auth, or a trusted
proxy's header), each action checked against the role, and actions that a page on another
site cannot trigger.

The middleware puts the user's name in ``scope["planloop.user"]`` and role in
``scope["planloop.role"]``; the rest of the console reads them from there.

Actions are POSTs with a JSON body: a cross-site HTML form cannot send
``application/json`` and a cross-site ``fetch`` with it needs a CORS preflight this app
never grants. An ``Origin`` header, which browsers send on every POST, must also be this
console's own.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from planloop.config.settings import Settings
from planloop.console.users import ConsoleLogin, Role, User, hash_password, verify
from planloop.core.metrics import CONSOLE_REFUSED

REALM = 'Basic realm="planloop console"'
OPEN_PATHS = frozenset({"/healthz"})  # for healthchecks: says nothing about sessions
USER_KEY, ROLE_KEY = "planloop.user", "planloop.role"
# Logins already verified, by a keyed digest of their header: argon2 costs tens of
# milliseconds a check, and a page polls every few seconds.
VERIFIED_CACHE_SIZE = 1024


@dataclass(frozen=True)
class Identity:
    name: str
    role: Role


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` of an ``Authorization: Basic`` header, or None."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        given = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    name, colon, password = given.partition(":")
    return (name, password) if colon else None


class Authenticator:
    """Who a request comes from: a trusted proxy's user header, else basic auth."""

    def __init__(self, login: ConsoleLogin, settings: Settings) -> None:
        self.users = login.users
        self.proxy_header = settings.console_proxy_user_header.lower()
        self.proxies = frozenset(settings.console_trusted_proxies)
        self.proxy_role = Role(settings.console_proxy_role)
        self._key = secrets.token_bytes(32)
        self._verified: dict[bytes, Identity] = {}
        # an unknown name costs a check too, so timing does not tell which names exist
        self._decoy = User("", Role.VIEWER, hash_password(secrets.token_urlsafe(16)))

    async def identify(self, scope: Scope) -> Identity | None:
        headers = Headers(scope=scope)
        proxied = self._from_proxy(scope, headers)
        if proxied is not None:
            return proxied
        header = headers.get("authorization")
        if not header:
            return None
        digest = hmac.new(self._key, header.encode("utf-8"), hashlib.sha256).digest()
        known = self._verified.get(digest)
        if known is not None:
            return known
        found = await anyio.to_thread.run_sync(self._check, header)
        if found is not None:
            if len(self._verified) >= VERIFIED_CACHE_SIZE:
                self._verified.clear()
            self._verified[digest] = found
        return found

    def _from_proxy(self, scope: Scope, headers: Headers) -> Identity | None:
        if not self.proxy_header or not self.proxies:
            return None
        client = scope.get("client")
        if client is None or client[0] not in self.proxies:
            return None
        name = headers.get(self.proxy_header, "").strip()
        if not name:
            return None
        listed = self.users.get(name)
        return Identity(name, listed.role if listed else self.proxy_role)

    def _check(self, header: str) -> Identity | None:
        given = basic_credentials(header)
        if given is None:
            return None
        name, password = given
        user = self.users.get(name)
        if user is None:
            verify(self._decoy, password)
            return None
        return Identity(user.name, user.role) if verify(user, password) else None


def identity_of(request: Request) -> Identity:
    """The user the auth middleware let in (a viewer nobody, should it have been skipped)."""
    return Identity(
        str(request.scope.get(USER_KEY) or ""), Role(request.scope.get(ROLE_KEY) or "viewer")
    )


def role_refused(request: Request, needed: Role, what: str) -> Response | None:
    """A 403 when the request's user may not do ``what`` (it needs ``needed``), else None."""
    who = identity_of(request)
    if who.role.allows(needed):
        return None
    return JSONResponse(
        {
            "error": f"user {who.name!r} is a {who.role.value} and may not {what}: it needs "
            f"the {needed.value} role"
        },
        status_code=403,
    )


def same_origin(request: Request) -> bool:
    """No ``Origin`` (a script, curl) or this console's own scheme://host[:port]."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    parts = urlsplit(origin)
    return parts.netloc == host and parts.scheme == request.url.scheme


def action_refused(request: Request) -> Response | None:
    """Why an action request is refused (a 403/415 response), or None to go ahead."""
    if not same_origin(request):
        return JSONResponse({"error": "cross-origin action refused"}, status_code=403)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        return JSONResponse({"error": "actions take a JSON body"}, status_code=415)
    return None


class ConsoleAuth:
    """ASGI middleware: every HTTP request but the health check comes from a known user,
    named in the scope with their role; others get 401 and a basic-auth challenge."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        who = await self.authenticator.identify(scope)
        if who is not None:
            scope[USER_KEY], scope[ROLE_KEY] = who.name, who.role.value
            await self.app(scope, receive, send)
            return
        refusal = PlainTextResponse(
            "authentication required", status_code=401, headers={"WWW-Authenticate": REALM}
        )
        await refusal(scope, receive, send)


# An async endpoint: a function of the request, or a method (self, request).
Endpoint = Callable[..., Awaitable[Response]]


def requires(needed: Role, what: str) -> Callable[[Endpoint], Endpoint]:
    """An endpoint decorator: the request's user must hold ``needed`` (or a role above it)
    to ``what``, else a 403 naming both (counted as a refusal). The one guard of the
    console's role-gated endpoints: admin ones use :func:`admin_only`."""

    def wrap(endpoint: Endpoint) -> Endpoint:
        @functools.wraps(endpoint)
        async def guarded(*args: Any) -> Response:
            request = args[-1]  # after self, for a method
            refused = role_refused(request, needed, what)
            if refused is not None:
                CONSOLE_REFUSED.labels("role").inc()
                return refused
            return await endpoint(*args)

        return guarded

    return wrap


def admin_only(what: str) -> Callable[[Endpoint], Endpoint]:
    """:func:`requires` the admin role (lessons, settings, forks)."""
    return requires(Role.ADMIN, what)
