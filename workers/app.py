"""The one Celery app of the worker pool, configured from :class:`config.Settings`.

``celery -A workers.app worker`` and ``planloop worker`` both land here.
"""

from __future__ import annotations

import logging
import os
import socket
from functools import lru_cache

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

from config.celery import celery_config
from config.settings import Settings, get_settings
from core.effects import SqlEffectLedger
from core.hot_state import BreakerPolicy, HotState, RedisEffectCache, connect
from core.keys import Keys
from core.masking import install_log_masking
from core.tools import load_tools
from core.values import ValueLimits
from workers.catalogue import publish_while_serving
from workers.executor import StepExecutor

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> Celery:
    """A Celery app with Planloop's configuration and the step task registered."""
    celery_app = Celery("planloop", set_as_current=False)
    celery_app.conf.update(celery_config(settings))
    from workers.tasks import register_tasks

    register_tasks(celery_app)
    return celery_app


@lru_cache(maxsize=1)
def executor() -> StepExecutor:
    """This worker process's executor (built on first use, after any fork)."""
    settings = get_settings()
    # Retries ride out a Redis outage, so an outcome is not lost to a blip.
    client = connect(settings.redis_url, retry_s=settings.worker_redis_retry_s)
    keys = Keys(settings.key_prefix)
    tools = load_tools(settings.tool_modules)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    log.info("worker %s ready with %d tools", worker, len(tools.names()))
    policy = BreakerPolicy(
        settings.breaker_failures, settings.breaker_window_s, settings.breaker_cooldown_s
    )
    # The cache has a client of its own: it answers or fails at once, never waits out an
    # outage (SQL has the answer).
    cache = RedisEffectCache(connect(settings.redis_url), keys)
    effects = SqlEffectLedger.from_settings(settings, cache=cache)
    return StepExecutor(
        HotState(client, keys, blob_ttl_s=settings.blob_ttl_s),
        tools,
        effects,
        worker,
        policy,
        limits=ValueLimits.from_settings(settings),
    )


def run_worker(argv: list[str]) -> int:
    """Run ``celery worker`` with ``argv``; its exit code.

    Celery's ``worker_main`` and ``start`` drop the code (click hands it back as a return
    value they ignore), so a worker that stopped on a broker failure would exit 0 and a
    ``restart: on-failure`` policy would never bring it back.
    """
    from celery.bin.celery import celery as command

    command.params[0].default = app  # the --app option, as Celery.start sets it
    try:
        code = command.main(args=argv, standalone_mode=False)
    finally:
        command.params[0].default = None
    return code if isinstance(code, int) else 0


app = create_app(get_settings())
publish_while_serving(get_settings())  # pl:tools: what this worker serves (core/catalogue.py)


def _mask_logs(logger: logging.Logger, **_: object) -> None:
    install_log_masking(logger)  # the worker's log lines pass the one masker (core/masking.py)


after_setup_logger.connect(_mask_logs, weak=False)
after_setup_task_logger.connect(_mask_logs, weak=False)
