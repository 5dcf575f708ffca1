"""The session report built from hand-made step states."""

from __future__ import annotations

from typing import Any

from planloop.core.hot_state import dumps
from planloop.core.models import SessionStatus, StepState, StepStatus
from planloop.core.values import PREVIEW_CHARS as OUTPUT_PREVIEW_CHARS
from planloop.planner.plan import Plan
from planloop.supervisor.session.report import build_report

PLAN = Plan.model_validate(
    {
        "goal": "report me",
        "steps": [
            {"id": "a", "title": "first", "tool": "bench.echo", "params": {"value": 1}},
            {"id": "b", "tool": "bench.sleep", "dependencies": ["a"]},
            {"id": "c", "tool": "bench.echo", "params": {"value": 2}, "dependencies": ["b"]},
            {"id": "d", "tool": "bench.echo", "params": {"value": 3}},
        ],
    }
)


def report(
    states: dict[str, StepState],
    outputs: dict[str, Any],
    *,
    status: SessionStatus = SessionStatus.COMPLETED,
    error: str = "",
    started_at: float = 100.0,
) -> dict[str, Any]:
    return build_report(
        "sid-1",
        PLAN,
        states,
        outputs,
        status=status,
        error=error,
        started_at=started_at,
        finished_at=103.5,
        replans=0,
        plan_version=1,
    )


STATES = {
    "a": StepState(
        status=StepStatus.COMPLETED,
        attempt=1,
        worker="w1",
        started_at=100.5,
        finished_at=101.0,
    ),
    "b": StepState(
        status=StepStatus.FAILED,
        attempt=3,
        worker="w2",
        started_at=101.0,
        finished_at=101.25,
        error="TransientToolError: boom",
        note="final",
    ),
    "c": StepState(status=StepStatus.SKIPPED, note="dependency 'b' did not complete"),
}


def test_report_has_one_entry_per_step_in_plan_order() -> None:
    out = report(STATES, {"a": {"value": 1}})

    assert out["session_id"] == "sid-1"
    assert out["goal"] == "report me"
    assert [s["id"] for s in out["steps"]] == ["a", "b", "c", "d"]
    assert out["duration_s"] == 3.5
    assert out["status"] == "completed"
    assert out["error"] is None


def test_report_entries_carry_status_timings_errors_and_outputs() -> None:
    steps = {s["id"]: s for s in report(STATES, {"a": {"value": 1}})["steps"]}

    assert steps["a"] == {
        "id": "a",
        "title": "first",
        "tool": "bench.echo",
        "status": "completed",
        "attempts": 1,
        "worker": "w1",
        "started_at": 100.5,
        "finished_at": 101.0,
        "duration_s": 0.5,
        "error": None,
        "note": None,
        "output": {"value": 1},
    }
    assert steps["b"]["status"] == "failed"
    assert steps["b"]["attempts"] == 3
    assert steps["b"]["duration_s"] == 0.25
    assert steps["b"]["error"] == "TransientToolError: boom"
    assert steps["b"]["output"] is None
    assert steps["c"]["status"] == "skipped"
    assert steps["c"]["note"] == "dependency 'b' did not complete"
    assert steps["c"]["started_at"] is None
    assert steps["c"]["duration_s"] is None


def test_a_step_without_state_reports_pending() -> None:
    steps = {s["id"]: s for s in report(STATES, {})["steps"]}

    assert steps["d"]["status"] == "pending"
    assert steps["d"]["attempts"] == 0
    assert steps["d"]["output"] is None


def test_counts_add_up_to_the_steps() -> None:
    out = report(STATES, {})

    assert out["counts"] == {"completed": 1, "failed": 1, "skipped": 1, "pending": 1}
    assert sum(out["counts"].values()) == len(PLAN.steps)


def test_failed_session_carries_its_error() -> None:
    out = report(STATES, {}, status=SessionStatus.FAILED, error="critical step 'b' failed: boom")

    assert out["status"] == "failed"
    assert out["error"] == "critical step 'b' failed: boom"


def test_large_outputs_are_truncated_to_a_preview() -> None:
    big = {"text": "x" * (OUTPUT_PREVIEW_CHARS * 2)}
    small = {"text": "y" * 10}
    states = {**STATES, "a": STATES["a"].model_copy(update={"output_ref": "d" * 64})}
    steps = {s["id"]: s for s in report(states, {"a": big, "b": small})["steps"]}

    preview = steps["a"]["output"]
    assert preview["truncated"] is True
    assert len(preview["preview"]) == OUTPUT_PREVIEW_CHARS
    assert preview["bytes"] == len(dumps(big)), "the preview says how big the output is"
    assert preview["ref"] == "d" * 64, "and where the whole output is stored"
    assert steps["b"]["output"] == small


def test_session_never_started_has_no_duration() -> None:
    assert report({}, {}, started_at=0.0)["duration_s"] is None


def test_outputs_errors_and_goal_are_masked() -> None:
    done = StepState(status=StepStatus.COMPLETED, attempt=1)
    failed = StepState(status=StepStatus.FAILED, attempt=1, error="cannot reach redis://u:S1@h")
    outputs = {"a": {"rows": [{"pin": "S2", "access_token": "S3", "prompt_tokens": 7}]}}
    built = build_report(
        "sid-1",
        PLAN.model_copy(update={"goal": "use api_key=S4"}),
        {"a": done, "b": failed},
        outputs,
        status=SessionStatus.FAILED,
        error="token=S5",
        started_at=100.0,
        finished_at=103.5,
        replans=0,
        plan_version=1,
        sensitive={"pin"},
    )
    text = str(built)
    for secret in ("S1", "S2", "S3", "S4", "S5"):
        assert secret not in text
    assert built["steps"][0]["output"] == {
        "rows": [{"pin": "***", "access_token": "***", "prompt_tokens": 7}]
    }


def test_a_truncated_preview_is_masked_too() -> None:
    big = {"pin": "S1", "token": "S2", "text": "x" * (OUTPUT_PREVIEW_CHARS * 2)}
    built = build_report(
        "sid-1",
        PLAN,
        {"a": StepState(status=StepStatus.COMPLETED, attempt=1)},
        {"a": big},
        status=SessionStatus.COMPLETED,
        error="",
        started_at=100.0,
        finished_at=103.5,
        replans=0,
        plan_version=1,
        sensitive={"pin"},
    )
    preview = built["steps"][0]["output"]["preview"]
    assert '"pin":"***"' in preview
    assert "S1" not in preview
    assert "S2" not in preview
