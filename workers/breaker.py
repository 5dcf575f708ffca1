"""Circuit breakers per tool, shared by every worker through Redis.

The worker's hot path checks and counts breakers inside its claim and record scripts
(:mod:`core.hot_state`); this module reads and drives them on their own (tests, tooling).

Closed: calls run. ``failures`` transient failures within ``window_s`` open it: calls fail
fast with TOOL_UNAVAILABLE. After ``cooldown_s`` one call runs as a half-open probe: its
success closes the breaker, its failure opens it again.
"""

from __future__ import annotations

import time
import uuid

import redis

from core.hot_state import BreakerPolicy
from core.keys import Keys
from core.lua import BREAKER_ALLOW, BREAKER_RECORD


class CircuitBreakers:
    """The breakers of every tool, kept in Redis."""

    def __init__(self, client: redis.Redis, keys: Keys, policy: BreakerPolicy) -> None:
        self.keys = keys
        self.policy = policy
        self._allow = client.register_script(BREAKER_ALLOW)
        self._record = client.register_script(BREAKER_RECORD)

    def allow(self, tool: str) -> bool:
        """May a call of ``tool`` run now (closed, or the half-open probe)?"""
        state = self._allow(
            keys=[self.keys.breaker(tool)], args=[time.time(), self.policy.cooldown_s]
        )
        return bool(state != "open")

    def record(self, tool: str, ok: bool) -> str:
        """Count one call's outcome; returns the breaker's state after it."""
        key = self.keys.breaker(tool)
        args = [
            time.time(),
            "1" if ok else "0",
            self.policy.window_s,
            self.policy.failures,
            uuid.uuid4().hex,
        ]
        return str(self._record(keys=[key, f"{key}:failures"], args=args))
