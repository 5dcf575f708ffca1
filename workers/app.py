"""The one Celery app of the worker pool, configured from :class:`config.Settings`.

``celery -A workers.app worker`` and ``planloop worker`` both land here.
"""

from __future__ import annotations

import logging
import os
import socket
from functools import lru_cache

from celery import Celery

from config.celery import celery_config
from config.settings import Settings, get_settings
from core.hot_state import BreakerPolicy, HotState, RedisEffectLedger, connect
from core.keys import Keys
from core.tools import load_tools
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
    client = connect(settings.redis_url)
    keys = Keys(settings.key_prefix)
    tools = load_tools(settings.tool_modules)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    log.info("worker %s ready with %d tools", worker, len(tools.names()))
    policy = BreakerPolicy(
        settings.breaker_failures, settings.breaker_window_s, settings.breaker_cooldown_s
    )
    return StepExecutor(
        HotState(client, keys, blob_ttl_s=settings.blob_ttl_s),
        tools,
        RedisEffectLedger(client, keys),
        worker,
        policy,
    )


app = create_app(get_settings())
