"""The Celery broker transport: kombu's Redis transport, with step messages held by our scripts.

Two changes to kombu's Redis transport, both about round trips on the worker:

* **One client per channel.** Stock kombu builds a new ``redis.Redis`` client for every
  publish and every ack (with redis-py 8 that is a ~170-entry callbacks table, about 0.3 ms
  each). The client is a thin, thread-safe wrapper around the channel's connection pool, so
  one per pool is enough; a new pool (after a reconnect) gets a new client.

* **Step messages are held and settled by the attempt's own scripts.** kombu emulates late
  acks with an "unacked" hash and index: on receipt it writes the message there (a round
  trip on the consumer's thread, before the next message can be fetched), on ack it deletes
  it (another, before the prefetch slot frees). For ``planloop.step`` messages the entry
  instead goes along with the claim script, and its removal along with the outcome script
  (core/receipts.py). So a step costs the worker two round trips fewer, and the outcome
  and the ack happen together or not at all. A message the supervisor dispatched under
  kombu's default hash name has its entry written by the dispatch already (a held tag):
  the claim only indexes it, and the message is not sent to Redis a second time.

  Until its claim has written the entry, a received step message is *parked* in memory
  (``core.receipts.receipts``). A worker that stops takes parked messages back to the queue
  with the rest of its unacked ones; one killed in that sub-millisecond window loses the
  message, as stock kombu does between its pop and its write, and the supervisor's watchdog
  sends the attempt again.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from celery.app import amqp as celery_amqp
from kombu.connection import Connection as KombuConnection
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from planloop.config.celery import SENTINEL_TRANSPORT, STEP_TASK, TRANSPORT, TRANSPORTS
from planloop.core.errors import ConfigError
from planloop.core.receipts import Receipt, receipts
from planloop.core.seams import check_transport_options

SENTINEL_RETRY_START_S = 0.5  # first wait of a broker reconnect behind Sentinel


class QoS(kombu_redis.QoS):
    """kombu's Redis ack emulation, except that step messages are parked on receipt."""

    def append(self, message: Any, delivery_tag: str) -> None:
        if message.headers.get("task") != STEP_TASK:
            super().append(message, delivery_tag)  # type: ignore[no-untyped-call]
            return
        delivery = message.delivery_info
        receipts.park(
            Receipt(
                tag=delivery_tag,
                unacked_key=self.unacked_key,
                index_key=self.unacked_index_key,
                message=message._raw,
                exchange=delivery["exchange"],
                routing_key=delivery["routing_key"],
            )
        )
        virtual.QoS.append(self, message, delivery_tag)  # type: ignore[no-untyped-call]

    def ack(self, delivery_tag: str) -> None:
        if receipts.on_ack(delivery_tag):
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]
        else:
            super().ack(delivery_tag)  # type: ignore[no-untyped-call]

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self.hold([delivery_tag])
        receipts.on_ack(delivery_tag)
        super().reject(delivery_tag, requeue=requeue)  # type: ignore[no-untyped-call]

    def restore_unacked(self, client: Any = None) -> None:
        self.hold(list(self._delivered), client)
        super().restore_unacked(client)  # type: ignore[no-untyped-call]

    def hold(self, tags: list[str], client: Any = None) -> None:
        """Write still-parked step messages into the unacked entries kombu restores from."""
        parked = receipts.unpark(tags)
        if not parked:
            return
        with self.pipe_or_acquire(client=client) as pipe:
            for r in parked:
                pipe.zadd(r.index_key, {r.tag: time.time()}).hset(r.unacked_key, r.tag, r.entry)
            pipe.execute()


class Channel(kombu_redis.Channel):
    """A Redis channel whose synchronous client is built once per connection pool."""

    QoS = QoS
    _sync_client: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        # What the options made of the channel, however they reached it (Flower, an app
        # configured elsewhere): the hooks below need kombu's unprefixed, emulated acks.
        try:
            check_transport_options(
                {"global_keyprefix": self.global_keyprefix, "ack_emulation": self.ack_emulation}
            )
        except ConfigError:
            # its pool's connections, opened by kombu's ping
            self.close()  # type: ignore[no-untyped-call]
            raise

    def _restore(self, message: Any, leftmost: bool = False) -> None:
        self.qos.hold([message.delivery_tag])
        super()._restore(message, leftmost)  # type: ignore[no-untyped-call]

    def _create_client(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            # Closed after its broker connection was lost: Celery still acks a finished
            # task's message, and restores unacked ones, through it. kombu would fail with
            # an AttributeError that ends the worker; a connection error is what Celery
            # expects and ignores there (the supervisor sends lost attempts again).
            raise redis.ConnectionError("broker channel closed after a lost connection")
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client(False)  # type: ignore[no-untyped-call]
        return client


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """:class:`Channel` whose connection pool is kombu's sentinel-managed one (the master's,
    looked up again on every new connection)."""


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's sentinel transport with :class:`SentinelChannel`."""

    Channel = SentinelChannel


class BrokerConnection(KombuConnection):
    """A kombu connection whose URI names the Redis scheme its transport speaks.

    kombu writes a connection's ``transport_cls`` as its URI scheme; ours is a class path
    (``workers.transport:Transport``), and Flower picks its broker client (the Broker page,
    ``/api/queues/length``) by that scheme: it answered "'redis' broker is not supported".
    The transport is kombu's Redis one, so the URI says ``redis`` (``rediss`` with TLS).
    """

    def ensure_connection(self, *args: Any, **kwargs: Any) -> Any:
        """kombu's reconnect loop; behind Sentinel its first tries come sooner.

        kombu waits 2 s, then 4 s, ... between tries, which a worker pays again after every
        failover: the master is replaced in a few seconds, and a worker that tried just
        before that waited up to 4 s more. Behind Sentinel the waits start at
        ``SENTINEL_RETRY_START_S`` and grow by as much, up to kombu's 30 s.
        """
        if self.transport_cls == SENTINEL_TRANSPORT:
            kwargs.setdefault("interval_start", SENTINEL_RETRY_START_S)
            kwargs.setdefault("interval_step", SENTINEL_RETRY_START_S)
        return super().ensure_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    def as_uri(self, include_password: Any = False, mask: Any = "**", getfields: Any = None) -> str:
        if getfields is None:
            uri: str = super().as_uri(include_password, mask)
        else:
            uri = super().as_uri(include_password, mask, getfields)
        if self.transport_cls not in TRANSPORTS:
            return uri
        _, sep, rest = uri.partition("://")
        if self.transport_cls != TRANSPORT:
            return f"sentinel{sep}{rest}"  # Flower's sentinel broker client
        return f"{'rediss' if self.ssl else 'redis'}{sep}{rest}"


class AMQP(celery_amqp.AMQP):  # type: ignore[misc]
    """Celery's messaging layer, with :class:`BrokerConnection` (``Celery(amqp=...)``)."""

    Connection = BrokerConnection
