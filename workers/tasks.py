"""The Celery task: a thin shell that validates its JSON arguments and calls the executor.

The executor comes from the app the task is registered on (:class:`StepTask`), never from a
module global: the app's :class:`~workers.runtime.WorkerRuntime` was built from the settings
given to ``create_app``.

The task's Celery state tells the truth, for Flower and anything else that reads Celery's
events: an attempt that completed is SUCCESS; one that failed or was interrupted is RETRY
when the supervisor will retry it (the same rule: ``StepTaskArgs.retried_after``), FAILURE
otherwise. Either way the exception is raised *after* the executor recorded the outcome and
its event in one atomic Redis call, and the supervisor reads those, never Celery's states.
Celery then acknowledges the message as it does for any finished task (late acks ack on
failure too: ``task_acks_on_failure_or_timeout``), and the broker's ack has nothing left to
do (core/receipts.py: the outcome script settled it). Nothing is re-queued: a raised ``Retry``
without ``Task.retry`` sends no new message; the supervisor dispatches the next attempt under
its own task id.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Task
from celery.exceptions import Retry

from planloop.config.celery import STEP_TASK
from planloop.core.errors import StepAttemptFailed
from planloop.core.models import StepTaskArgs
from planloop.core.redis_faults import is_redis_fault
from planloop.core.tracing import TRACEPARENT, step_span
from planloop.workers.outcomes import Attempt
from planloop.workers.runtime import PlanloopCelery, WorkerRuntime

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
        acks_on_failure_or_timeout=True,  # a FAILURE is final for its message: never requeued
        reject_on_worker_lost=True,
        ignore_result=True,
        # An expected outcome, not a crash: Celery logs it on one line, without a traceback.
        throws=(StepAttemptFailed,),
        bind=True,
    )
    def run_step(task: StepTask, args: dict[str, Any]) -> str:
        # kombu's delivery tag: the claim and outcome scripts hold and ack the message.
        tag = (task.request.properties or {}).get("delivery_tag")
        step = StepTaskArgs.model_validate(args)
        try:
            with step_span(getattr(task.request, TRACEPARENT, None), span_attributes(step)) as span:
                attempt = task.runtime.executor().execute(step, delivery_tag=tag)
                if span is not None:
                    span.set_attribute("planloop.result", attempt.result)
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
            raise failure(step, Attempt("unrecorded", f"outcome not recorded: {exc}")) from None
        if attempt.failed:
            raise_failure(step, attempt)
        return attempt.result


def failure(step: StepTaskArgs, attempt: Attempt) -> StepAttemptFailed:
    """The exception that ends the task of ``step``'s failed ``attempt`` in FAILURE."""
    return StepAttemptFailed(
        f"{step.tool} {attempt.result}: {attempt.error}",
        session_id=step.session_id,
        step_id=step.step_id,
        attempt=step.attempt,
        tool=step.tool,
        error_kind=attempt.error_kind,
    )


def raise_failure(step: StepTaskArgs, attempt: Attempt) -> None:
    """End the task in RETRY when the supervisor retries the step, else in FAILURE."""
    exc = failure(step, attempt)
    if step.retried_after(attempt.error_kind):
        # Celery's own retry state, without Task.retry's new message: the supervisor sends
        # the next attempt (its own task id) after the step's back-off.
        raise Retry(f"attempt {step.attempt} of {step.max_retries + 1}: {exc}", exc=exc)
    raise exc


def span_attributes(step: StepTaskArgs) -> dict[str, Any]:
    """What a step attempt's span says: ids and the tool, never params."""
    return {
        "planloop.session": step.session_id,
        "planloop.step": step.step_id,
        "planloop.attempt": step.attempt,
        "planloop.tool": step.tool,
    }
