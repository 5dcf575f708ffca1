"""Who may use the console: basic auth on every page (Flower's credentials), and actions
that a page on another site cannot trigger.

Actions are POSTs with a JSON body: a cross-site HTML form cannot send
``application/json`` and a cross-site ``fetch`` with it needs a CORS preflight this app
never grants. An ``Origin`` header, which browsers send on every POST, must also be this
console's own.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

REALM = 'Basic realm="planloop console"'
OPEN_PATHS = frozenset({"/healthz"})  # for healthchecks: says nothing about sessions


def credentials_match(header: str | None, expected: str) -> bool:
    """Whether an ``Authorization: Basic`` header carries ``user:password`` ``expected``."""
    if not header or not header.lower().startswith("basic "):
        return False
    try:
        given = base64.b64decode(header[6:].strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, expected.encode("utf-8"))


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


class BasicAuth:
    """ASGI middleware asking every HTTP request for ``user:password``."""

    def __init__(self, app: ASGIApp, credentials: str) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = Request(scope).headers.get("authorization")
        if credentials_match(header, self.credentials):
            await self.app(scope, receive, send)
            return
        refusal = PlainTextResponse(
            "authentication required", status_code=401, headers={"WWW-Authenticate": REALM}
        )
        await refusal(scope, receive, send)
