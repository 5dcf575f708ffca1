"""A step's task arguments travel without the fields left at their defaults, and the worker
reads the same attempt back (supervisor/io/step_queue.py dumps them so)."""

from __future__ import annotations

import json

import pytest

from planloop.core.models import StepTaskArgs
from planloop.core.values import ValueRef

BARE = StepTaskArgs(
    session_id="s1",
    step_id="a",
    attempt=1,
    epoch=3,
    tool="bench.sleep",
    params={},
    timeout_s=60.0,
    idempotency_key="s1:a",
)
FULL = BARE.model_copy(
    update={
        "critical": True,
        "expect": [{"path": "ok", "equals": True}],
        "param_refs": {"rows": ValueRef(digest="0" * 64, path=[], size=10)},
        "instruction": "look",
        "max_retries": 2,
        "dispatched_at": 1.5,
        "queue": "planloop.x",
        "requested_by": "ops",
    }
)


@pytest.mark.parametrize("args", [BARE, FULL], ids=["defaults", "every-field-set"])
def test_the_worker_reads_the_same_attempt_from_the_arguments_without_defaults(
    args: StepTaskArgs,
) -> None:
    wire = json.loads(json.dumps(args.wire()))
    assert StepTaskArgs.model_validate(wire) == args


def test_defaults_stay_off_the_wire() -> None:
    wire = BARE.wire()
    assert set(wire) == {
        "session_id", "step_id", "attempt", "epoch", "tool", "params", "timeout_s",
        "idempotency_key",
    }  # fmt: skip
