"""The step task's Celery state: FAILURE, RETRY by the supervisor's rule; the broker URI."""

from __future__ import annotations

import pickle

import pytest
from celery.exceptions import Retry

from planloop.config.settings import Settings
from planloop.core.errors import StepAttemptFailed
from planloop.core.models import ErrorKind, StepTaskArgs
from planloop.workers.app import create_app
from planloop.workers.outcomes import Attempt
from planloop.workers.tasks import raise_failure


def _args(attempt: int, max_retries: int) -> StepTaskArgs:
    return StepTaskArgs(
        session_id="s1",
        step_id="a",
        attempt=attempt,
        epoch=1,
        tool="bench.sleep",
        params={},
        timeout_s=1,
        idempotency_key="s1:a",
        max_retries=max_retries,
    )


def test_a_failure_the_supervisor_retries_is_a_celery_retry() -> None:
    attempt = Attempt("failed", "TransientToolError: blip", ErrorKind.TRANSIENT)
    with pytest.raises(Retry) as raised:
        raise_failure(_args(1, 1), attempt)
    assert isinstance(raised.value.exc, StepAttemptFailed)


@pytest.mark.parametrize(("attempt", "kind"), [(2, ErrorKind.TRANSIENT), (1, ErrorKind.PERMANENT)])
def test_a_final_failure_is_a_celery_failure_naming_the_step(attempt: int, kind: str) -> None:
    with pytest.raises(StepAttemptFailed) as raised:
        raise_failure(_args(attempt, 1), Attempt("failed", "boom", kind))
    exc = raised.value
    assert (exc.session_id, exc.step_id, exc.attempt, exc.tool) == (
        "s1",
        "a",
        attempt,
        "bench.sleep",
    )
    again = pickle.loads(pickle.dumps(exc))  # the prefork pool sends it to the parent
    assert (str(again), again.step_id) == (str(exc), "a")


def test_the_broker_uri_names_the_redis_scheme_for_flower() -> None:
    app = create_app(Settings(redis_url="redis://:pw@127.0.0.1:6379/13"))
    with app.connection() as conn:
        assert conn.as_uri(include_password=True) == "redis://:pw@127.0.0.1:6379/13"
        assert conn.as_uri() == "redis://:**@127.0.0.1:6379/13"
    app.close()
