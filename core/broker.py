"""The Celery broker transport: kombu's Redis transport, reusing one client per channel.

Stock kombu builds a new ``redis.Redis`` client for every publish and every ack (with
redis-py 8 that is a ~170-entry callbacks table, about 0.3 ms each). The client is a thin,
thread-safe wrapper around the channel's connection pool, so one per pool is enough; a new
pool (after a reconnect) gets a new client.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """A Redis channel whose synchronous client is built once per connection pool."""

    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client(False)  # type: ignore[no-untyped-call]
        return client


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
