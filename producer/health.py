"""``planloop health``: is the worker or supervisor on this host serving? For healthchecks.

Each check looks for a process of this host (container) by name: a worker answering a Celery
ping, a supervisor whose heartbeat (``pl:supervisors``) is fresh. Exit code 0 healthy, 1 not.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from planloop.config.settings import Settings
from planloop.core.credentials import kept_flower_login
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.redis_client import redis_address

SUPERVISOR_STALE_S = 15.0  # a serving supervisor beats every 2 s (supervisor/process/service.py)


@dataclass(frozen=True)
class Health:
    """The answer of one check: healthy or not, and why, for the healthcheck log."""

    ok: bool
    detail: str


def worker_health(settings: Settings, host: str | None = None, timeout_s: float = 2.0) -> Health:
    """A worker named ``…@host`` (this host by default) answers a Celery ping."""
    from planloop.workers.app import create_app

    host = host or socket.gethostname()
    app = create_app(settings)
    try:
        replies = cast(list[dict[str, Any]], app.control.ping(timeout=timeout_s) or [])
    finally:
        app.close()
    names = [name for reply in replies for name in reply]
    mine = [n for n in names if n.endswith(f"@{host}")]
    if mine:
        return Health(True, f"worker {mine[0]} answers")
    return Health(False, f"no worker on {host} answered a ping ({len(names)} elsewhere did)")


def supervisor_health(settings: Settings, host: str | None = None) -> Health:
    """A supervisor of this host served within the last few heartbeats."""
    host = host or socket.gethostname()
    client = connect(redis_address(settings))
    try:
        seen = cast(
            list[tuple[str, float]],
            client.zrange(Keys(settings.key_prefix).supervisors, 0, -1, withscores=True),
        )
    finally:
        client.close()
    now = time.time()
    mine = [(name, at) for name, at in seen if name.startswith(f"sup-{host}-")]
    fresh = [name for name, at in mine if now - at < SUPERVISOR_STALE_S]
    if fresh:
        return Health(True, f"supervisor {fresh[0]} serves")
    return Health(False, f"no supervisor on {host} served in the last {SUPERVISOR_STALE_S:g}s")


def http_health(
    url: str, *, basic_auth: str | None = None, timeout_s: float = 3.0, body: str | None = None
) -> Health:
    """``url`` answers below 500 (and with ``body`` when given); ``basic_auth`` is user:pass."""
    import base64
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url)  # noqa: S310 (a local http URL we build ourselves)
    if basic_auth:
        token = base64.b64encode(basic_auth.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:  # noqa: S310
            text = reply.read(1024).decode("utf-8", "replace")
            status = int(reply.status)
    except urllib.error.HTTPError as exc:
        text, status = "", exc.code
    except (urllib.error.URLError, OSError) as exc:
        return Health(False, f"{url} does not answer: {exc}")
    if status >= 500 or (body is not None and text.strip() != body):
        return Health(False, f"{url} answered {status} {text[:80]!r}")
    return Health(True, f"{url} answered {status}")


def flower_health(settings: Settings, port: int | None = None) -> Health:
    """Flower on this host answers its ``/healthcheck`` (behind our basic auth)."""
    return http_health(
        f"http://127.0.0.1:{port or settings.flower_port}/healthcheck",
        basic_auth=kept_flower_login(
            settings.flower_basic_auth.get_secret_value(), Path(settings.secrets_dir)
        ),
        body="OK",
    )


def console_health(port: int) -> Health:
    """The console on this host answers HTTP (401 counts: it asks for credentials)."""
    return http_health(f"http://127.0.0.1:{port}/")
