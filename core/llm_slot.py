"""A session's LLM call slot: one call at a time for a session with a budget.

The budget check before a call (core/llm_meter.py) reads every call charged so far; two
calls that start together (parallel agent steps on workers, the loop beside them) would
both pass it on the same spend and could end the session several calls over its budget.
Holding this slot from the check to the charge makes each check see the calls before it,
so a session ends at most one call over. Only sessions with a budget take it.

The slot is a redis-py lock (``{prefix}:s:{sid}:llm-slot``) that expires after
``ttl_s``: a process that dies holding it frees it then, and a call that outlives it (a
very slow stream) only loses the serialization, never blocks the session.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import redis

from planloop.config.settings import Settings
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.redis_client import redis_address

log = logging.getLogger(__name__)

_CLIENTS: dict[str, redis.Redis] = {}
_CLIENTS_LOCK = threading.Lock()


def slot_ttl_s(settings: Settings) -> float:
    """How long one call may hold the slot: every try of the request, with back-off room."""
    tries = settings.llm_max_retries + 1
    return max(30.0, 2 * settings.llm_timeout_s * tries + 10.0)


def session_slot(
    settings: Settings, sid: str, client: redis.Redis | None = None
) -> Callable[[], AbstractContextManager[object]]:
    """The call slot of ``sid`` on the settings' Redis (a shared sync client per URL)."""
    if client is None:
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(settings.redis_url)
            if client is None:
                client = _CLIENTS[settings.redis_url] = connect(redis_address(settings))
    key = f"{Keys(settings.key_prefix).session(sid)}:llm-slot"
    ttl = slot_ttl_s(settings)
    held_by = client

    @contextmanager
    def hold() -> Iterator[object]:
        lock = held_by.lock(key, timeout=ttl, blocking_timeout=ttl, thread_local=False)
        acquired = False
        try:
            acquired = bool(lock.acquire())
        except redis.RedisError as exc:  # Redis down: the call goes on unserialized
            log.warning("session=%s LLM call slot not taken: %s", sid, exc)
        if not acquired:
            log.warning("session=%s LLM call slot still held after %.0fs: going on", sid, ttl)
        try:
            yield lock
        finally:
            if acquired:
                try:
                    lock.release()
                except redis.RedisError as exc:  # expired or Redis down: it frees itself
                    log.info("session=%s LLM call slot not released: %s", sid, exc)

    return hold
