"""Contract tests of the library seams (core/seams.py) on real Redis, and the start-up guards
of the shipped processes.

The contracts use *stock* kombu (its own Redis transport) and redis-py: each fails when a
release changes what Planloop's transport (workers/transport.py) or scripts (core/lua/,
supervisor/io/redis_store.py) assume of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from kombu import Connection
from redis.exceptions import NoScriptError

from planloop.config.celery import TRANSPORT
from planloop.config.settings import Settings
from planloop.core.errors import ConfigError
from planloop.core.receipts import Receipt
from tests.shipped import shipped

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


@pytest.fixture
def names(test_settings: Settings, redis_client: redis.Redis) -> Iterator[dict[str, str]]:
    """A private queue and unacked hash, index and mutex, so no worker touches them."""
    base = f"{test_settings.key_prefix}:seams"
    keys = {
        "queue": f"{base}:queue",
        "unacked_key": f"{base}:unacked",
        "unacked_index_key": f"{base}:unacked_index",
        "unacked_mutex_key": f"{base}:unacked_mutex",
    }
    yield keys
    redis_client.delete(*keys.values(), f"_kombu.binding.{keys['queue']}")


@pytest.fixture
def stock(test_settings: Settings, names: dict[str, str]) -> Iterator[Any]:
    """A channel of kombu's own Redis transport, on the private names."""
    options = {k: v for k, v in names.items() if k != "queue"}
    connection = Connection(test_settings.redis_url, transport_options=options)
    channel = connection.channel()
    yield channel
    connection.release()


def _put(test_settings: Settings, queue: str, body: dict[str, Any]) -> None:
    with Connection(test_settings.redis_url) as connection:
        connection.SimpleQueue(queue).put(body)


def _receipt(channel: Any, message: Any) -> Receipt:
    """The receipt Planloop's QoS would park for ``message`` (workers/transport.py)."""
    return Receipt(
        tag=message.delivery_tag,
        unacked_key=channel.qos.unacked_key,
        index_key=channel.qos.unacked_index_key,
        message=message._raw,
        exchange=message.delivery_info["exchange"],
        routing_key=message.delivery_info["routing_key"],
    )


def test_kombu_writes_and_acks_the_unacked_entry_a_receipt_writes(
    test_settings: Settings, redis_client: redis.Redis, names: dict[str, str], stock: Any
) -> None:
    _put(test_settings, names["queue"], {"probe": 1})
    queued = json.loads(redis_client.lindex(names["queue"], 0) or "")

    message = stock.basic_get(names["queue"])  # stock QoS.append writes the entry

    assert message._raw == queued  # _raw: the message as it was queued
    tag = message.delivery_tag
    written = redis_client.hget(names["unacked_key"], tag)
    assert json.loads(written or "") == json.loads(_receipt(stock, message).entry)
    assert redis_client.zscore(names["unacked_index_key"], tag) == pytest.approx(
        time.time(), abs=60
    )
    assert tag in stock.qos._delivered

    message.ack()  # stock QoS.ack: what the outcome script does (HDEL, ZREM), then virtual's

    assert not redis_client.hexists(names["unacked_key"], tag)
    assert redis_client.zscore(names["unacked_index_key"], tag) is None


def test_kombu_restores_an_entry_the_claim_script_wrote(
    test_settings: Settings, redis_client: redis.Redis, names: dict[str, str], stock: Any
) -> None:
    _put(test_settings, names["queue"], {"probe": 2})
    message = stock.basic_get(names["queue"])
    receipt = _receipt(stock, message)
    # As a parked step message: no entry from kombu, then the claim script's (core/lua/attempts.py).
    redis_client.hdel(receipt.unacked_key, receipt.tag)
    redis_client.zrem(receipt.index_key, receipt.tag)
    redis_client.zadd(receipt.index_key, {receipt.tag: time.time()})
    redis_client.hset(receipt.unacked_key, receipt.tag, receipt.entry)

    stock._restore(message)  # what a stopping worker's restore does for each message

    assert not redis_client.hexists(receipt.unacked_key, receipt.tag)
    again = stock.basic_get(names["queue"])
    assert again is not None, "kombu did not restore the entry in Planloop's layout"
    assert again.body == message.body
    assert again.delivery_info["redelivered"]
    again.ack()


def test_a_stock_channel_builds_its_client_on_its_pool(stock: Any) -> None:
    first, second = stock._create_client(), stock._create_client(asynchronous=False)

    assert isinstance(first, redis.Redis)
    assert first.connection_pool is stock.pool
    # A new client each time: what Planloop's channel saves by keeping one per pool.
    assert first is not second


def test_a_pipeline_returns_noscript_in_place_of_a_lost_script(test_settings: Settings) -> None:
    source = "return ARGV[1]"

    async def run() -> list[Any]:
        client = aioredis.Redis.from_url(test_settings.redis_url)
        try:
            script = client.register_script(source)
            assert script.sha == hashlib.sha1(source.encode()).hexdigest()
            await client.script_load(source)
            pipe = client.pipeline(transaction=False)
            pipe.evalsha("0" * 40, 0, "lost")  # a script Redis does not have
            pipe.evalsha(script.sha, 0, "ran")
            return list(await pipe.execute(raise_on_error=False))
        finally:
            await client.aclose()

    lost, ran = asyncio.run(run())

    assert isinstance(lost, NoScriptError)
    assert ran == b"ran"


def test_planloops_channel_refuses_a_global_key_prefix(test_settings: Settings) -> None:
    connection = Connection(
        test_settings.redis_url,
        transport=TRANSPORT,
        transport_options={"global_keyprefix": "shared:"},
    )
    try:
        with pytest.raises(ConfigError, match=r"global_keyprefix"):
            connection.channel()
    finally:
        connection.release()


# --- the shipped processes refuse at start-up ------------------------------------------------


def _run(test_settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLANLOOP_", "CELERY_"))}
    planloop_env = {
        "PLANLOOP_REDIS_URL": test_settings.redis_url,
        "PLANLOOP_KEY_PREFIX": f"{test_settings.key_prefix}-seams",
        "PLANLOOP_QUEUE": f"{test_settings.queue}-seams",
        "PLANLOOP_DATABASE_URL": test_settings.database_url,
    }
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**base, **planloop_env, **env}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _other_redis(test_settings: Settings) -> str:
    """The test Redis with another database: a broker that is not PLANLOOP_REDIS_URL."""
    base, _, db = test_settings.redis_url.rpartition("/")
    return f"{base}/{(int(db) + 1) % 16}"


def test_a_worker_refuses_a_celery_config_module_that_moves_its_broker(
    test_settings: Settings, tmp_path: Path
) -> None:
    # Celery loads CELERY_CONFIG_MODULE (``celery --config``) under the app's own settings;
    # one Planloop does not set (broker_read_url) reaches the worker's consumer.
    (tmp_path / "site_celery.py").write_text(f"broker_read_url = {_other_redis(test_settings)!r}\n")

    done = _run(
        test_settings,
        "worker",
        "--pool",
        "solo",
        CELERY_CONFIG_MODULE="site_celery",
        PYTHONPATH=str(tmp_path),
    )

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Celery's broker_read_url is" in done.stderr
    assert "CELERY_CONFIG_MODULE=site_celery" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["worker", "supervisor"])
def test_a_process_refuses_a_celery_broker_url_other_than_planloops_redis(
    test_settings: Settings, command: str
) -> None:
    done = _run(test_settings, command, CELERY_BROKER_URL=_other_redis(test_settings))

    assert done.returncode in (1, 2), (done.stdout, done.stderr)
    assert "CELERY_BROKER_URL" in done.stderr
    assert "unset CELERY_BROKER_URL" in done.stderr
