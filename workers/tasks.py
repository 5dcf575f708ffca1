"""The Celery task: a thin shell that validates its JSON arguments and calls the executor."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task

from config.celery import STEP_TASK
from core.models import StepTaskArgs


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
        return executor().execute(StepTaskArgs.model_validate(args), delivery_tag=tag)
