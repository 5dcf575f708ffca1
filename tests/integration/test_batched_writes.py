"""Several sessions' fenced writes made in one turn of the event loop (the first dispatches
of sessions starting together) leave in one round trip through ``SessionStore.write``: each
write fenced by its own session's epoch, and a Redis that lost its scripts (restarted,
flushed) runs them all the same, once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from planloop.core.errors import FencedOutError
from planloop.core.keys import Keys
from planloop.supervisor.io.redis_store import SessionStore
from tests.conftest import MakeRedis

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

Write = tuple[str, int, Sequence[Any]]


def counted(store: SessionStore) -> list[int]:
    """The number of writes in each round trip the store makes."""
    sizes: list[int] = []
    send = store._send_writes

    async def send_counted(calls: Any) -> list[Any]:
        sizes.append(len(calls))
        return await send(calls)

    store._writes._send = send_counted  # type: ignore[assignment]
    return sizes


async def together(store: SessionStore, writes: list[Write]) -> list[BaseException | None]:
    """``writes`` made in one turn of the event loop; per write, None or why it failed."""
    outcomes = await asyncio.gather(
        *(store.write(sid, epoch, ops) for sid, epoch, ops in writes), return_exceptions=True
    )
    return [o if isinstance(o, BaseException) else None for o in outcomes]


def test_each_write_is_fenced_by_its_own_session(private_redis: MakeRedis) -> None:
    server = private_redis()
    keys = Keys(f"wm{uuid.uuid4().hex[:6]}")

    async def scenario() -> tuple[list[BaseException | None], list[str | None], list[int]]:
        store = SessionStore.from_url(server.url, keys)
        sizes = counted(store)
        try:
            for sid, epoch in (("a", 1), ("old", 3), ("b", 2)):
                await store.r.hset(keys.session(sid), "epoch", epoch)  # type: ignore[misc]
            writes: list[Write] = [
                (sid, epoch, [store.step_write(sid, "s0", status="running")])
                for sid, epoch in (("a", 1), ("old", 2), ("b", 2))
            ]
            outcomes = await together(store, writes)
            statuses = [
                await store.r.hget(keys.step(sid, "s0"), "status")  # type: ignore[misc]
                for sid in ("a", "old", "b")
            ]
            return outcomes, statuses, sizes
        finally:
            await store.r.aclose()

    outcomes, statuses, sizes = asyncio.run(scenario())
    assert sizes == [3]  # one round trip
    assert outcomes[0] is None
    assert isinstance(outcomes[1], FencedOutError)
    assert outcomes[2] is None
    assert statuses == ["running", None, "running"]


def test_writes_run_once_after_redis_lost_its_scripts(private_redis: MakeRedis) -> None:
    server = private_redis()
    keys = Keys(f"wm{uuid.uuid4().hex[:6]}")

    async def scenario() -> tuple[list[BaseException | None], list[int]]:
        store = SessionStore.from_url(server.url, keys)
        try:
            for sid in ("a", "b"):
                await store.r.hset(keys.session(sid), "epoch", 1)  # type: ignore[misc]
            first: list[Write] = [
                (sid, 1, [("LPUSH", f"{keys.prefix}:q:{sid}", ["m"])]) for sid in ("a", "b")
            ]
            assert await together(store, first) == [None, None]
            await store.r.script_flush()  # as a restarted Redis: no script is known
            outcomes = await together(store, first)
            counts = [
                await store.r.llen(f"{keys.prefix}:q:{sid}")  # type: ignore[misc]
                for sid in ("a", "b")
            ]
            return outcomes, counts
        finally:
            await store.r.aclose()

    outcomes, counts = asyncio.run(scenario())
    assert outcomes == [None, None]
    assert counts == [2, 2], "each write ran once more, not twice"
