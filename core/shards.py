"""Which session shard a session belongs to, and who holds a shard's lease.

Sessions are owned by shard, as Temporal owns workflow histories: a fixed number of shards
(``PLANLOOP_SESSION_SHARDS``), each leased by one supervisor with a fencing epoch of its own,
so lease traffic grows with the shards, not with the sessions. Every process must agree on
a session's shard, so it is a stable hash of the id (CRC32: the same in every process and
release, unlike Python's salted ``hash``).
"""

from __future__ import annotations

import zlib
from typing import cast

import redis

from planloop.core.keys import Keys


def shard_of(sid: str, shards: int) -> int:
    """The shard of session ``sid`` among ``shards``."""
    return zlib.crc32(sid.encode()) % shards


def shard_token(owner: str, nonce: str) -> str:
    """The value of a shard lease: who holds it (``owner``), made unique by ``nonce``."""
    return f"{owner}:{nonce}"


def token_owner(token: str | None) -> str | None:
    """The supervisor named by a shard lease's value (None: the shard is free)."""
    if not token:
        return None
    owner, _, _nonce = token.rpartition(":")
    return owner or None


def shard_holder(client: redis.Redis, keys: Keys, sid: str, shards: int) -> str | None:
    """The supervisor holding the shard of session ``sid`` now (None: nobody)."""
    return token_owner(cast(str | None, client.get(keys.shard_lease(shard_of(sid, shards)))))
