"""PLANLOOP_REDIS_URL in kombu's sentinel form: parsing, the master setting, Celery's view."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from pydantic import SecretStr
from redis.exceptions import ReadOnlyError

from planloop.config.celery import SENTINEL_TRANSPORT, TRANSPORT, celery_config
from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, PlanloopError
from planloop.core.redis_client import (
    SENTINEL_TIMEOUT_S,
    SentinelAddress,
    SentinelMasterMissingError,
    async_client,
    parse_redis_url,
    redis_address,
    sync_client,
)
from planloop.core.redis_faults import is_redis_fault, redact_url
from planloop.core.redis_urls import same_redis
from planloop.core.settings_check import check_settings

TWO = "sentinel://h1:26379;sentinel://h2:26380/0"


def test_a_sentinel_url_lists_each_sentinel_and_the_database() -> None:
    address = parse_redis_url(TWO, master="mymaster")
    assert address.sentinel == SentinelAddress(
        sentinels=(("h1", 26379), ("h2", 26380)), master="mymaster", db=0
    )
    assert address.url == TWO


def test_a_sentinel_without_port_or_database_takes_the_defaults() -> None:
    address = parse_redis_url("sentinel://h1;sentinel://h2:1", master="m")
    assert address.sentinel is not None
    assert address.sentinel.sentinels == (("h1", 26379), ("h2", 1))
    assert address.sentinel.db == 0


def test_the_data_password_is_the_urls_and_the_sentinels_their_own() -> None:
    address = parse_redis_url(
        "sentinel://:da%40ta@h1:26379;sentinel://:da%40ta@h2:26379/3",
        master="m",
        sentinel_password="sent",
    )
    s = address.sentinel
    assert s is not None
    assert (s.password, s.sentinel_password, s.db) == ("da@ta", "sent", 3)
    assert s.transport_options() == {"master_name": "m", "sentinel_kwargs": {"password": "sent"}}


def test_kombus_url_carries_the_login_and_database_on_every_part() -> None:
    # kombu reads both from the first part only; the database was on the last one here
    s = parse_redis_url("sentinel://h1:1;sentinel://:pw@h2:2/5", master="m").sentinel
    assert s is not None
    assert s.kombu_url() == "sentinel://:pw@h1:1/5;sentinel://:pw@h2:2/5"


def test_a_plain_url_is_not_a_sentinel_one() -> None:
    assert parse_redis_url("redis://127.0.0.1:6379/0", master="ignored").sentinel is None


def test_a_sentinel_url_without_the_master_setting_says_which_setting() -> None:
    with pytest.raises(SentinelMasterMissingError) as caught:
        parse_redis_url("sentinel://:secret@h1:26379", master="")
    assert isinstance(caught.value, ConfigError)
    assert isinstance(caught.value, PlanloopError)
    assert caught.value.setting == "PLANLOOP_REDIS_SENTINEL_MASTER"
    assert "PLANLOOP_REDIS_SENTINEL_MASTER" in str(caught.value)
    assert "secret" not in str(caught.value)


def test_settings_check_refuses_a_sentinel_url_without_its_master() -> None:
    with pytest.raises(SentinelMasterMissingError):
        check_settings(Settings(redis_url=TWO), record=False)
    check_settings(Settings(redis_url=TWO, redis_sentinel_master="m"), record=False)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sentinel://h1:26379;redis://h2:6379", "not sentinel://"),
        ("sentinel://:26379", "names no host"),
        ("sentinel://h1:port", "not a number"),
        ("sentinel://h1/zero", "not a number"),
        ("sentinel://h1/0;sentinel://h2/1", "different databases"),
    ],
)
def test_a_sentinel_url_that_does_not_parse_is_a_config_error(url: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        parse_redis_url(url, master="m")
    assert caught.value.setting == "PLANLOOP_REDIS_URL"


def test_celery_uses_the_sentinel_transport_with_the_master_and_sentinel_password() -> None:
    settings = Settings(
        redis_url=TWO,
        redis_sentinel_master="m",
        redis_sentinel_password=SecretStr("sent"),
    )
    conf = celery_config(settings)
    assert conf["broker_transport"] == SENTINEL_TRANSPORT
    assert conf["broker_url"] == "sentinel://h1:26379/0;sentinel://h2:26380/0"
    assert conf["broker_transport_options"] == {
        "visibility_timeout": settings.visibility_timeout_s,
        "master_name": "m",
        "sentinel_kwargs": {"password": "sent"},
    }
    assert same_redis(conf["broker_url"], settings.redis_url)
    plain = celery_config(Settings(redis_url="redis://127.0.0.1:6379/0"))
    assert plain["broker_transport"] == TRANSPORT
    assert "master_name" not in plain["broker_transport_options"]


def test_sentinel_urls_name_the_same_redis_in_any_order_not_across_databases() -> None:
    assert same_redis(
        "sentinel://h2:2;sentinel://localhost:1", "sentinel://127.0.0.1:1;sentinel://h2:2/0"
    )
    assert not same_redis("sentinel://h1:1/0", "sentinel://h1:1/1")
    assert not same_redis("sentinel://h1:1", "redis://h1:1")


def test_redaction_covers_every_part_of_a_sentinel_url() -> None:
    shown = redact_url("sentinel://:pw@h1:1;sentinel://:pw@h2:2/0")
    assert "pw" not in shown
    assert shown == "sentinel://:***@h1:1;sentinel://:***@h2:2/0"


def test_redis_address_reads_the_settings() -> None:
    settings = Settings(redis_url=TWO, redis_sentinel_master="m")
    address = redis_address(settings)
    assert address.sentinel is not None
    assert address.sentinel.master == "m"
    assert address.sentinel.sentinel_password is None


def test_a_demoted_master_and_a_master_without_replicas_are_faults_to_ride_out() -> None:
    assert is_redis_fault(ReadOnlyError("You can't write against a read only replica."))
    assert is_redis_fault(redis.ResponseError("NOREPLICAS Not enough good replicas to write."))
    assert not is_redis_fault(redis.ResponseError("WRONGTYPE Operation against a key"))


def test_sentinel_clients_log_in_on_each_side_and_bound_the_sentinels_time_outs() -> None:
    address = parse_redis_url(
        "sentinel://:data@h1:26379;sentinel://h2:26380/3", master="m", sentinel_password="sent"
    )
    client = sync_client(address, decode_responses=True)  # nothing connects yet
    pool: Any = client.connection_pool
    assert pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["password"] == "data"
    assert pool.service_name == "m"
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
    assert [(k["host"], k["port"]) for k in sentinels] == [("h1", 26379), ("h2", 26380)]
    assert {k["password"] for k in sentinels} == {"sent"}
    assert {k["socket_connect_timeout"] for k in sentinels} == {SENTINEL_TIMEOUT_S}
    client.close()


def test_the_async_client_waits_for_a_connection_when_bounded() -> None:
    address = parse_redis_url(TWO, master="m")
    client = async_client(address, max_connections=4, timeout=2)
    assert isinstance(client.connection_pool, aioredis.BlockingConnectionPool)
    assert client.connection_pool.max_connections == 4
    plain = async_client("redis://127.0.0.1:1/0", max_connections=4, timeout=2)
    assert isinstance(plain.connection_pool, aioredis.BlockingConnectionPool)
