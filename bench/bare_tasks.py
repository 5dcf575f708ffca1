"""Bare Celery tasks for the baselines: Planloop's Celery settings on stock kombu, no Planloop.

Started by the benchmarks as ``celery -A bench.bare_tasks worker``; reads the same
``PLANLOOP_*`` settings, so it uses the benchmark's Redis and queue.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from typing import Any

import redis
from celery import Celery

from planloop.config.celery import celery_config
from planloop.config.settings import Settings
from planloop.core.hot_state import connect

INCR_TASK = "bench.bare.incr"
SLEEP_TASK = "bench.bare.sleep"


# Planloop's own transport and consumer classes; the baseline runs Celery's.
PLANLOOP_CLASSES = ("broker_transport", "worker_consumer")


def stock_celery_config(settings: Settings) -> dict[str, Any]:
    """Planloop's Celery settings on stock Celery and kombu: the baseline is plain Celery.

    With task events on: Planloop's consumer sends them while a monitor listens
    (workers/consumer.py); stock Celery cannot tell, so it sends them for Flower always."""
    config = {k: v for k, v in celery_config(settings).items() if k not in PLANLOOP_CLASSES}
    return {**config, "worker_send_task_events": True}


settings = Settings()
app = Celery("planloop-bare", set_as_current=False)
app.conf.update(stock_celery_config(settings))


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    return connect(settings.redis_url)


@app.task(name=INCR_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
def incr(counter: str, total: int) -> None:
    """Count one completion; the one that reaches ``total`` stamps the finish time."""
    client = _redis()
    if int(client.incr(counter)) == total:
        client.set(f"{counter}:done_at", repr(time.time()))


@app.task(name=SLEEP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
def sleep(done_list: str, step_id: str, seconds: float) -> None:
    """Sleep, then push ``{step, started_at, finished_at}`` for the driver to react to."""
    started = time.time()
    if seconds:
        time.sleep(seconds)
    done = {"step": step_id, "started_at": started, "finished_at": time.time()}
    _redis().rpush(done_list, json.dumps(done))
