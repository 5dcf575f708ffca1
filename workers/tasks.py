"""The Celery task: a thin shell that validates its JSON arguments and calls the executor.

The executor comes from the app the task is registered on (:class:`StepTask`), never from a
module global: the app's :class:`~workers.runtime.WorkerRuntime` was built from the settings
given to ``create_app``.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Task

from config.celery import STEP_TASK
from core.models import StepTaskArgs
from core.redis_faults import is_redis_fault
from workers.runtime import PlanloopCelery, WorkerRuntime

log = logging.getLogger(__name__)


class StepTask(Task):  # type: ignore[misc]
    """Base of ``planloop.step``: reaches the worker runtime through its own app."""

    @property
    def runtime(self) -> WorkerRuntime:
        app: PlanloopCelery = self.app
        return app.runtime


def register_tasks(celery_app: PlanloopCelery) -> None:
    """Register ``planloop.step`` on ``celery_app``."""

    @celery_app.task(  # type: ignore[untyped-decorator]
        name=STEP_TASK,
        base=StepTask,
        shared=False,  # this app's task only: another app has its own runtime
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        bind=True,
    )
    def run_step(task: StepTask, args: dict[str, Any]) -> str:
        # kombu's delivery tag: the claim and outcome scripts hold and ack the message.
        tag = (task.request.properties or {}).get("delivery_tag")
        step = StepTaskArgs.model_validate(args)
        try:
            return task.runtime.executor().execute(step, delivery_tag=tag)
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
