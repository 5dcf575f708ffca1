"""Whether two Redis URLs name the same Redis: compared as redis-py connects, not as text.

``redis://localhost:6379/0``, ``redis://127.0.0.1:6379`` and ``redis://:pw@127.0.0.1/0``
reach one server and database; a check that compares the text (Celery's broker against
PLANLOOP_REDIS_URL, ``planloop up``'s "is this the Redis I was given") would call them
different. Credentials do not make another Redis; the scheme's TLS, the host, the port,
the database and a Unix socket's path do. Sentinel URLs (``sentinel://h1:p1;sentinel://h2:p2``)
name the same Redis when they list the same sentinels (in any order) and database.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url

DEFAULT_PORT = 6379
SENTINEL_PORT = 26379
# Names of this host's loopback interface: one Redis listening on 127.0.0.1 answers them.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]", "localhost.localdomain"})


def redis_identity(url: str) -> tuple[Any, ...] | None:
    """What tells ``url``'s Redis apart (TLS, host, port, db, socket path), or None when
    redis-py cannot parse it."""
    if url.strip().lower().startswith("sentinel://"):
        return _sentinel_identity(url)
    try:
        parts: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError:
        return None
    db = int(parts.get("db") or 0)
    connection = parts.get("connection_class")
    if connection is UnixDomainSocketConnection:
        return ("unix", str(parts.get("path", "")), db)
    port = int(parts.get("port") or DEFAULT_PORT)
    return ("tls" if connection is SSLConnection else "tcp", _host(parts.get("host")), port, db)


def _sentinel_identity(url: str) -> tuple[Any, ...] | None:
    """The sentinels a sentinel URL lists (as a set) and its database."""
    sentinels: set[tuple[str, int]] = set()
    dbs: set[str] = set()
    for part in (p.strip() for p in url.split(";")):
        if not part:
            continue
        split = urlsplit(part)
        try:
            sentinels.add((_host(split.hostname), split.port or SENTINEL_PORT))
        except ValueError:
            return None
        if split.path.strip("/"):
            dbs.add(split.path.strip("/"))
    if len(dbs) > 1 or not all(db.isdigit() for db in dbs):
        return None
    return ("sentinel", frozenset(sentinels), int(dbs.pop()) if dbs else 0)


def _host(name: object) -> str:
    host = str(name or "localhost").lower().rstrip(".")
    return "loopback" if host in LOOPBACK_NAMES or host.startswith("127.") else host


def same_redis(first: str, second: str) -> bool:
    """Whether ``first`` and ``second`` reach the same Redis server and database (module
    docstring); two URLs that do not parse are the same only when they are equal."""
    if first == second:
        return True
    one, other = redis_identity(first), redis_identity(second)
    return one is not None and one == other
