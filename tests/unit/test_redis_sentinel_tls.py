"""PLANLOOP_REDIS_SENTINEL_TLS* reach every client behind Sentinel: redis-py's sentinel
connections and master pool, kombu's transport options and Celery's broker_use_ssl."""

from __future__ import annotations

from redis.sentinel import SentinelManagedSSLConnection

from planloop.config.celery import celery_config
from planloop.config.settings import Settings
from planloop.core.redis_client import redis_address, sync_client

URL = "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379/0"


def _settings(**tls: object) -> Settings:
    return Settings(redis_url=URL, redis_sentinel_master="m", **tls)  # type: ignore[arg-type]


def test_tls_reaches_the_sentinels_the_master_pool_and_the_broker() -> None:
    settings = _settings(
        redis_sentinel_tls=True,
        redis_sentinel_tls_ca_file="/etc/ca.pem",
        redis_sentinel_tls_cert_file="/etc/client.pem",
        redis_sentinel_tls_key_file="/etc/client.key",
        redis_sentinel_password="spw",
    )
    wanted = {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": "/etc/ca.pem",
        "ssl_certfile": "/etc/client.pem",
        "ssl_keyfile": "/etc/client.key",
    }
    client = sync_client(redis_address(settings))  # connects to nothing until used
    pool = client.connection_pool
    assert issubclass(pool.connection_class, SentinelManagedSSLConnection)
    assert {k: pool.connection_kwargs[k] for k in wanted} == wanted
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool  # type: ignore[attr-defined]
    assert sentinel.connection_kwargs["password"] == "spw"
    assert {k: sentinel.connection_kwargs[k] for k in wanted} == wanted
    client.close()
    conf = celery_config(settings)
    assert conf["broker_use_ssl"] == wanted
    options = conf["broker_transport_options"]
    assert options["sentinel_kwargs"] == {"ssl": True, "password": "spw", **wanted}


def test_without_tls_nothing_asks_for_it() -> None:
    settings = _settings()
    client = sync_client(redis_address(settings))
    assert not issubclass(client.connection_pool.connection_class, SentinelManagedSSLConnection)
    client.close()
    conf = celery_config(settings)
    assert "broker_use_ssl" not in conf
    assert "sentinel_kwargs" not in conf["broker_transport_options"]
