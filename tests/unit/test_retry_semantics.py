"""Which tool failures are retried: every exception, unless declared permanent."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import BaseModel

from planloop.core.catalogue import catalogue_entry
from planloop.core.errors import PermanentToolError, TransientToolError
from planloop.core.hot_state import HotState
from planloop.core.models import ErrorKind, StepTaskArgs
from planloop.core.tools import REGISTRY, MemoryEffectLedger, ToolContext, ToolRegistry, tool
from planloop.workers.executor import StepExecutor
from planloop.workers.outcomes import classify_error
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools)


class GoneError(Exception):
    """A user's own 'retrying cannot help' error."""


class NoParams(BaseModel):
    pass


class Count(BaseModel):
    n: int


class RecordingState:
    """The executor's two hot-state calls: every attempt is claimed, outcomes are kept."""

    def __init__(self) -> None:
        self.outcomes: list[dict[str, Any]] = []

    def start_attempt(self, *_: Any, **__: Any) -> int:
        return 1

    def record_outcome(self, sid: str, step_id: str, **outcome: Any) -> str:
        self.outcomes.append(outcome)
        return "1-0"


def run_once(tools: ToolRegistry, name: str, params: dict[str, Any]) -> dict[str, Any]:
    state = RecordingState()
    executor = StepExecutor(cast(HotState, state), tools, MemoryEffectLedger(), "w1")
    args = StepTaskArgs(
        session_id="s1",
        step_id="a",
        attempt=1,
        epoch=1,
        tool=name,
        params=params,
        timeout_s=10,
        idempotency_key="s1:a",
    )
    executor.execute(args)
    return state.outcomes[-1]


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValueError("bad"), ErrorKind.TRANSIENT),
        (TypeError("bad"), ErrorKind.TRANSIENT),
        (KeyError("k"), ErrorKind.TRANSIENT),
        (RuntimeError("x"), ErrorKind.TRANSIENT),
        (TransientToolError("blip"), ErrorKind.TRANSIENT),
        (PermanentToolError("no"), ErrorKind.PERMANENT),
        (GoneError("gone"), ErrorKind.PERMANENT),
        (TimeoutError(), ErrorKind.TIMEOUT),
    ],
)
def test_only_declared_permanent_errors_are_not_retried(exc: BaseException, kind: str) -> None:
    assert classify_error(exc, (GoneError,)) == kind


def test_a_subclass_of_a_non_retryable_class_is_permanent_and_others_are_not() -> None:
    assert classify_error(KeyError("k"), (LookupError,)) == ErrorKind.PERMANENT
    assert classify_error(ValueError("v"), (LookupError,)) == ErrorKind.TRANSIENT


def test_the_tool_decorator_declares_non_retryable_and_the_catalogue_names_them() -> None:
    registry = ToolRegistry()

    @tool(
        "t.count",
        description="Counts.",
        params=NoParams,
        output=Count,
        non_retryable=[GoneError, KeyError],
        registry=registry,
    )
    def count(params: NoParams, ctx: ToolContext) -> Count:
        raise GoneError("the thing is gone")

    spec = registry.get("t.count")
    assert spec.non_retryable == (GoneError, KeyError)
    entry = catalogue_entry(spec, "host:1", now=1.0)
    assert entry.non_retryable == [f"{__name__}.GoneError", "KeyError"]
    outcome = run_once(registry, "t.count", {})
    assert (outcome["status"], outcome["error_kind"]) == ("failed", "permanent")
    assert outcome["error"] == "GoneError: the thing is gone"


def test_non_retryable_must_hold_exception_classes() -> None:
    with pytest.raises(TypeError, match="non_retryable takes exception classes"):
        tool("t.bad", description="", params=NoParams, non_retryable=["KeyError"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("fail_with", "kind"),
    [
        ("ValueError", "transient"),
        ("transient", "transient"),
        ("permanent", "permanent"),
        ("non_retryable", "permanent"),
    ],
)
def test_bench_sleep_raises_what_fail_with_names(fail_with: str, kind: str) -> None:
    outcome = run_once(
        REGISTRY.subset(["bench"]), "bench.sleep", {"fail_attempts": [1], "fail_with": fail_with}
    )
    assert (outcome["status"], outcome["error_kind"]) == ("failed", kind)
    assert "scripted failure on attempt 1" in outcome["error"]


def test_params_that_do_not_fit_the_schema_stay_permanent() -> None:
    outcome = run_once(REGISTRY.subset(["bench"]), "bench.sleep", {"seconds": "soon"})
    assert (outcome["status"], outcome["error_kind"]) == ("failed", "permanent")
    assert "params do not fit" in outcome["error"]
