"""The session's LLM call slot on real Redis (core/llm_slot.py): one holder at a time,
across clients (a supervisor's and a worker's), and freed by expiry if a holder dies."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.llm_slot import session_slot

pytestmark = pytest.mark.integration


def test_two_clients_never_hold_one_sessions_slot_at_once(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    other = connect(test_settings.redis_url)  # another process's client
    slots = [
        session_slot(test_settings, "s-slot", redis_client),
        session_slot(test_settings, "s-slot", other),
    ]
    holders, most = [0], [0]
    guard = threading.Lock()

    def call(slot_index: int) -> None:
        with slots[slot_index]():
            with guard:
                holders[0] += 1
                most[0] = max(most[0], holders[0])
            time.sleep(0.02)
            with guard:
                holders[0] -= 1

    threads = [threading.Thread(target=call, args=(i % 2,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()

    assert most[0] == 1
    assert not redis_client.exists(f"{test_settings.key_prefix}:s:s-slot:llm-slot")


def test_a_slot_left_by_a_dead_holder_frees_itself(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    settings = test_settings.model_copy(update={"llm_timeout_s": 0.1, "llm_max_retries": 0})
    key = f"{Keys(settings.key_prefix).session('s-dead')}:llm-slot"
    redis_client.set(key, "a holder that died", px=300)  # as a killed worker leaves it

    with session_slot(settings, "s-dead", redis_client)():
        assert redis_client.get(key) not in (b"a holder that died", "a holder that died")
