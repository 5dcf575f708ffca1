"""The Redis versions Planloop runs on: 6.2 and newer, the line ``planloop up`` embeds.

6.2 brought what the supervisor and the broker rely on: XAUTOCLAIM (taking over a dead
owner's events), XTRIM MINID (trimming never past a pending event), and kombu's ZADD GT and
ZRANGE BYSCORE REV. Replies that differ between 6.2 and 7 are read in either shape where
they are used (XAUTOCLAIM in ``supervisor/io/redis_store.py``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from planloop.core.errors import ConfigError

MIN_REDIS_VERSION = (6, 2)


def parse_redis_version(text: str) -> tuple[int, ...] | None:
    """``7.0.15`` (or ``redis-server --version``'s ``v=7.0.15 ...``) -> (7, 0, 15); None if
    there is no version in ``text``."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(part) for part in match.groups()) if match else None


def require_redis_version(version: str, url: str) -> None:
    """Refuse a Redis older than 6.2, with a message that says what to do.

    Raises:
        ConfigError: ``version`` (the ``redis_version`` of the server at ``url``) is older
            than 6.2; the message names the server by host and port only (no password).
    """
    parsed = parse_redis_version(version)
    if parsed is not None and parsed < MIN_REDIS_VERSION:
        parts = urlsplit(url)
        raise ConfigError(
            f"Redis {version} at {parts.hostname}:{parts.port or 6379} is too old: "
            "Planloop needs Redis 6.2 or newer "
            "(XAUTOCLAIM, XTRIM MINID); upgrade it or point PLANLOOP_REDIS_URL at a newer one "
            "(`planloop up` embeds one when nothing answers)"
        )


async def require_supported_redis(client: aioredis.Redis, url: str) -> None:
    """:func:`require_redis_version` for the server ``client`` talks to (at ``url``)."""
    try:
        server = await client.info("server")
    except aioredis.ResponseError:  # INFO disabled (some managed services): cannot tell
        return
    require_redis_version(str(server.get("redis_version", "")), url)
