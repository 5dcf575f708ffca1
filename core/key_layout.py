"""Bring the keys a running deployment has in Redis to the current layout (``KEY_LAYOUT``).

Layout 1 (every release before the ``{<sid>}`` hash tags) named a session's keys
``pl:s:<sid>...`` and a tool's breaker ``pl:breaker:<tool>``; layout 2 tags them
(``pl:s:{<sid>}...``, ``pl:breaker:{<tool>}``) so each session's keys share one Redis
Cluster slot (core/keys.py). A supervisor brings Redis to layout 2 when it starts, before it
takes any session: each untagged key is renamed in place (``RENAMENX``: a stream keeps its
consumer groups and pending entries, a lease its TTL), then ``pl:layout`` records the layout
so later starts cost one GET. Sessions that were waiting, running or ended before the
upgrade go on under their new names.

Any number of supervisors may run it at once: a key one of them renamed is gone for the
others (``no such key``), which they count as done. A key whose new name already exists is
left as it was and counted as a conflict (logged): only a process of the old version,
still running after the upgrade, writes old names; stop every process of the old version
before starting the new one. The renames run on a single Redis; move to a cluster after
they did (a cluster refuses a rename across slots).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from dataclasses import dataclass

import redis.asyncio as aioredis

from planloop.core.keys import KEY_LAYOUT, Keys

log = logging.getLogger(__name__)

RENAME_BATCH = 500  # renames per pipeline round trip
SCAN_COUNT = 1_000


@dataclass(frozen=True)
class LayoutUpgrade:
    """What one run did: keys renamed, keys left because their new name was taken."""

    renamed: int = 0
    conflicts: int = 0


def tagged_name(keys: Keys, key: str, sids: Collection[str] = ()) -> str | None:
    """The layout-2 name of a layout-1 session or breaker key; None for any other key.

    A session id is read up to the first ``:`` (generated ids have none) unless a longer
    prefix of the name is one of ``sids`` (the ids in ``pl:sessions``).
    """
    session = f"{keys.prefix}:s:"
    if key.startswith(session) and not key.startswith(f"{session}{{"):
        parts = key[len(session) :].split(":")
        cut = next((n for n in range(len(parts), 1, -1) if ":".join(parts[:n]) in sids), 1)
        sid, rest = ":".join(parts[:cut]), parts[cut:]
        return f"{keys.session(sid)}{''.join(f':{p}' for p in rest)}" if sid else None
    breaker = f"{keys.prefix}:breaker:"
    if key.startswith(breaker) and not key.startswith(f"{breaker}{{"):
        tool = key[len(breaker) :]
        if tool.endswith(":failures"):
            return keys.breaker_failures(tool.removesuffix(":failures"))
        return keys.breaker(tool)
    return None


def untagged_patterns(keys: Keys) -> tuple[str, str]:
    """SCAN patterns that match layout-1 keys (and some layout-2 ones: filter them)."""
    prefix = re.sub(r"([*?\[\]\\])", r"\\\1", keys.prefix)  # glob characters in the prefix
    return f"{prefix}:s:*", f"{prefix}:breaker:*"


async def upgrade_key_layout(client: aioredis.Redis, keys: Keys) -> LayoutUpgrade:
    """Rename layout-1 keys under ``keys.prefix`` to layout 2, once per Redis.

    Raises:
        redis.RedisError: Redis failed mid-way; what was renamed stays renamed, and the
            next run (the caller retries) renames the rest.
    """
    if await client.get(keys.layout) == KEY_LAYOUT:
        return LayoutUpgrade()
    renamed = conflicts = 0
    sids = {str(sid) for sid in await client.zrange(keys.sessions, 0, -1)}
    moves: list[tuple[str, str]] = []
    for pattern in untagged_patterns(keys):
        async for key in client.scan_iter(match=pattern, count=SCAN_COUNT):
            new = tagged_name(keys, key, sids)
            if new is not None:
                moves.append((key, new))
    for start in range(0, len(moves), RENAME_BATCH):
        batch = moves[start : start + RENAME_BATCH]
        pipe = client.pipeline(transaction=False)
        for old, new in batch:
            pipe.renamenx(old, new)
        for (old, _new), reply in zip(batch, await pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, aioredis.ResponseError):
                if "no such key" not in str(reply).lower():  # another process renamed it
                    raise reply
            elif reply:
                renamed += 1
            else:
                conflicts += 1
                log.warning("key layout: %s left as it is: its new name is taken", old)
    await client.set(keys.layout, KEY_LAYOUT)
    if renamed or conflicts:
        log.info("key layout %s: renamed %d keys, %d conflicts", KEY_LAYOUT, renamed, conflicts)
    return LayoutUpgrade(renamed, conflicts)
