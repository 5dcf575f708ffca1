"""Celery configuration derived from :class:`Settings`: JSON only, late acks, prefetch 1."""

from __future__ import annotations

from typing import Any

from planloop.config.settings import Settings
from planloop.core.redis_client import redis_address

STEP_TASK = "planloop.step"
TRANSPORT = "planloop.workers.transport:Transport"
"""The ``broker_transport`` of every Planloop app: kombu's Redis transport, minus a client
construction per publish and ack (workers/transport.py)."""
SENTINEL_TRANSPORT = "planloop.workers.transport:SentinelTransport"
"""The same behind Redis Sentinel (a ``sentinel://`` PLANLOOP_REDIS_URL): kombu's sentinel
transport, which asks the sentinels for the master on every (re)connection."""
TRANSPORTS = (TRANSPORT, SENTINEL_TRANSPORT)


def step_task_name(tool: str) -> str:
    """The name a step's task shows (Celery's ``shadow``: worker logs, Flower): its tool's.

    The message still runs ``STEP_TASK``; only what people see changes.
    """
    return f"{STEP_TASK}:{tool}"


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings every Planloop worker and dispatcher uses.

    Raises:
        ConfigError: a sentinel PLANLOOP_REDIS_URL without PLANLOOP_REDIS_SENTINEL_MASTER,
            or one that does not parse.
    """
    address = redis_address(settings)
    transport_options: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout_s}
    extra: dict[str, Any] = {}
    if address.sentinel is not None:
        transport_options.update(address.sentinel.transport_options())
        tls = address.sentinel.broker_ssl()
        if tls is not None:  # kombu hands it to the connections of the master it finds
            extra["broker_use_ssl"] = tls
    return {
        **extra,
        "broker_url": address.broker_url(),
        "broker_transport": TRANSPORT if address.sentinel is None else SENTINEL_TRANSPORT,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": settings.worker_concurrency,
        "worker_pool": settings.worker_pool,
        # Off at start: a worker sends task events while a monitor listens (workers/consumer.py).
        "worker_send_task_events": False,
        # Celery's consumer, with task events published in batches (workers/consumer.py).
        "worker_consumer": "planloop.workers.consumer:Consumer",
        "task_send_sent_event": True,
        "worker_hijack_root_logger": False,
        # A lost broker connection is re-established with Celery's back-off (2 s more per
        # try, at most 30 s apart; 100 tries ride out far more than a minute). Tasks in
        # flight go on and record their outcomes through the executor's own client
        # (core/hot_state.py connect); only when the tries run out does the worker stop,
        # with exit code 1.
        "broker_connection_retry": True,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": 100,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "broker_transport_options": transport_options,
        "task_default_queue": settings.queue,
        "task_routes": {STEP_TASK: {"queue": settings.queue}},
    }
