"""Retry semantics a Celery or Temporal user expects, on real workers: a
tool's exception is retried within max_retries unless it is declared permanent."""

from __future__ import annotations

import pytest

from planloop.core.models import SessionOptions
from tests.integration.conftest import RunPlan, report_steps

pytestmark = pytest.mark.integration


def test_a_plain_value_error_is_retried_and_the_third_attempt_completes(
    run_plan: RunPlan,
) -> None:
    _, record = run_plan(
        """
steps:
  - id: flaky
    tool: bench.sleep
    params: {fail_attempts: [1, 2], fail_with: ValueError}
    max_retries: 2
"""
    )

    assert record.status.value == "completed", record.error
    flaky = report_steps(record)["flaky"]
    assert (flaky["status"], flaky["attempts"]) == ("completed", 3)
    assert flaky["output"]["attempt"] == 3


@pytest.mark.parametrize(
    ("fail_with", "raised"),
    [("permanent", "PermanentToolError"), ("non_retryable", "ScriptedNonRetryable")],
)
def test_a_declared_permanent_error_fails_at_the_first_attempt(
    run_plan: RunPlan, fail_with: str, raised: str
) -> None:
    _, record = run_plan(
        f"""
steps:
  - id: doomed
    tool: bench.sleep
    params: {{fail_attempts: [1], fail_with: {fail_with}}}
    max_retries: 3
""",
        SessionOptions(max_replans=0),
    )

    doomed = report_steps(record)["doomed"]
    assert (doomed["status"], doomed["attempts"]) == ("failed", 1), doomed
    assert doomed["error"].startswith(f"{raised}: bench.sleep: scripted failure on attempt 1")
