"""Which session shard a session belongs to, and who holds a shard.

Sessions are owned by shard, as Temporal owns workflow histories: a fixed number of shards
(``PLANLOOP_SESSION_SHARDS``), each held by one supervisor with a fencing epoch of its own.
Every process must agree on a session's shard, so it is a stable hash of the id (CRC32: the
same in every process and release, unlike Python's salted ``hash``).

A shard's key names its holder's token and never expires; the hold lasts while the holder's
liveness key (``Keys.holder_alive``, one per supervisor run, renewed a few times per lease
TTL) does. So keeping every shard costs one PEXPIRE per renewal, however many shards and
sessions a supervisor holds. A liveness key once gone is never written again (its holder
renews with PEXPIRE, which cannot bring it back, and starts a new token), so a shard naming
a dead token is free for good: whoever takes it compares and swaps the token it saw.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Sequence
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


def live_holders(tokens: Sequence[str | None], alive: Collection[str]) -> list[str | None]:
    """Per shard, the supervisor holding it (None: free): a token counts while alive."""
    return [token_owner(t) if t and t in alive else None for t in tokens]


def gone_holders(tokens: Sequence[str | None], holders: Sequence[str | None]) -> set[str]:
    """The supervisors whose hold has lapsed: named by a shard's token whose liveness is gone
    (``holders`` None there) and holding no shard under a live token. Such a supervisor is
    dead or has lost its hold; either way it is no peer to share shards with, even while it
    still counts as having looked lately."""
    lapsed = {token_owner(t) for t, h in zip(tokens, holders, strict=True) if t and h is None}
    return {owner for owner in lapsed if owner} - {h for h in holders if h}


def shard_holders(client: redis.Redis, keys: Keys, shards: Sequence[int]) -> list[str | None]:
    """The supervisor holding each of ``shards`` now (None: nobody); two round trips."""
    tokens = cast(list[str | None], client.mget([keys.shard_lease(s) for s in shards]))
    named = sorted({t for t in tokens if t})
    if not named:
        return [None] * len(tokens)
    flags = cast(list[str | None], client.mget([keys.holder_alive(t) for t in named]))
    return live_holders(tokens, {t for t, flag in zip(named, flags, strict=True) if flag})


def shard_holder(client: redis.Redis, keys: Keys, sid: str, shards: int) -> str | None:
    """The supervisor holding the shard of session ``sid`` now (None: nobody)."""
    return shard_holders(client, keys, [shard_of(sid, shards)])[0]
