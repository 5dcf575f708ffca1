"""The Celery task: a thin shell that validates its JSON arguments and calls the executor."""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Celery, Task

from config.celery import STEP_TASK
from core.models import StepTaskArgs
from core.redis_faults import is_redis_fault

log = logging.getLogger(__name__)


def register_tasks(celery_app: Celery) -> None:
    """Register ``planloop.step`` on ``celery_app``."""

    @celery_app.task(  # type: ignore[untyped-decorator]
        name=STEP_TASK,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        bind=True,
    )
    def run_step(task: Task, args: dict[str, Any]) -> str:
        from workers.app import executor

        # kombu's delivery tag: the claim and outcome scripts hold and ack the message.
        tag = (task.request.properties or {}).get("delivery_tag")
        step = StepTaskArgs.model_validate(args)
        try:
            return executor().execute(step, delivery_tag=tag)
        except redis.RedisError as exc:
            if not is_redis_fault(exc):
                raise
            log.error(
                "session=%s step=%s attempt=%d: redis unreachable past the worker's retries "
                "(%s), outcome not recorded; the supervisor's watchdog runs the attempt again "
                "after its timeout + grace",
                step.session_id,
                step.step_id,
                step.attempt,
                exc,
            )
            return "unrecorded"
