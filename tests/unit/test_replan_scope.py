"""The scope rule: full or incremental re-planning after a failure, and the rule
policy and the decision agent's report that use its pick."""

from __future__ import annotations

import pytest

from planloop.core.models import Event, EventType, Severity, StepState, StepStatus
from planloop.planner.decision import ReplanAction
from planloop.planner.plan import Plan, Step
from planloop.planner.situation import Situation, render_situation
from planloop.supervisor.session.policy import rule_verdict
from planloop.supervisor.session.replan_scope import ScopePick, pick_for_failures, pick_replan_scope

FULL, REMAINING = ReplanAction.REPLAN_FULL, ReplanAction.REPLAN_REMAINING


def s(step_id: str, *deps: str, **kwargs: object) -> Step:
    return Step(id=step_id, tool="bench.echo", dependencies=list(deps), **kwargs)  # type: ignore[arg-type]


def states(plan: Plan, **status: StepStatus) -> dict[str, StepState]:
    return {x.id: StepState(status=status.get(x.id, StepStatus.PENDING)) for x in plan.steps}


# a wide plan: x fails with one dependant among many independent steps
WIDE = Plan(steps=[s("x"), s("y", "x"), *(s(f"w{i}") for i in range(6))])
# a chain: a → b → c → d → e
CHAIN = Plan(steps=[s("a"), s("b", "a"), s("c", "b"), s("d", "c"), s("e", "d")])


def test_a_failure_with_little_downstream_is_re_planned_incrementally() -> None:
    pick = pick_replan_scope(WIDE, "x", states(WIDE, x=StepStatus.FAILED), 0)
    assert (pick.action, pick.downstream, pick.depth, pick.plan_steps) == (REMAINING, 1, 1, 8)
    assert pick.reason == (
        "REPLAN_REMAINING (1 of 8 steps downstream of x, 1 level deep, 0 re-plans so far)"
    )


def test_a_leaf_failure_is_incremental_and_the_second_re_plan_escalates_to_full() -> None:
    st = states(WIDE, y=StepStatus.FAILED)
    assert pick_replan_scope(WIDE, "y", st, 0).action == REMAINING
    assert pick_replan_scope(WIDE, "y", st, 1).action == REMAINING
    assert pick_replan_scope(WIDE, "y", st, 2).action == FULL
    assert pick_replan_scope(WIDE, "y", st, 5).action == FULL


@pytest.mark.parametrize(
    ("failed", "completed", "expected", "downstream", "depth"),
    [
        ("a", (), FULL, 4, 4),  # the whole plan hangs off a
        ("b", ("a",), FULL, 3, 3),  # three levels below b: more than two
        ("c", ("a", "b"), REMAINING, 2, 2),  # two levels, 2 of 5 steps: incremental
        ("d", ("a", "b", "c"), REMAINING, 1, 1),
    ],
)
def test_the_depth_of_what_is_downstream_decides_on_a_chain(
    failed: str, completed: tuple[str, ...], expected: ReplanAction, downstream: int, depth: int
) -> None:
    done = {c: StepStatus.COMPLETED for c in completed}
    pick = pick_replan_scope(CHAIN, failed, states(CHAIN, **done, **{failed: StepStatus.FAILED}), 0)
    assert (pick.action, pick.downstream, pick.depth) == (expected, downstream, depth)


def test_more_than_three_steps_downstream_or_more_than_half_the_plan_is_full() -> None:
    fan = Plan(
        steps=[s("root"), *(s(f"f{i}", "root") for i in range(4)), *(s(f"o{i}") for i in range(6))]
    )
    pick = pick_replan_scope(fan, "root", states(fan), 0)
    assert (pick.action, pick.downstream, pick.depth) == (FULL, 4, 1)  # 4 > 3, though shallow
    half = Plan(steps=[s("p"), s("q", "p"), s("r", "p"), s("t", "p"), s("z")])
    pick = pick_replan_scope(half, "p", states(half), 0)
    assert (pick.action, pick.downstream) == (FULL, 3)  # 3 of 5 below p: more than half
    even = Plan(steps=[s("p"), s("q", "p"), s("r", "p"), s("z")])
    assert pick_replan_scope(even, "p", states(even), 0).action == REMAINING  # 2 of 4
    small = Plan(steps=[s("p"), s("q", "p")])
    assert pick_replan_scope(small, "p", states(small), 0).action == REMAINING  # 1 of 2


def test_completed_steps_downstream_weigh_nothing() -> None:
    # after a re-plan, steps below the failed one may have completed; both scopes freeze them
    done = {x: StepStatus.COMPLETED for x in ("c", "d", "e")}
    pick = pick_replan_scope(CHAIN, "a", states(CHAIN, **done), 0)
    assert (pick.action, pick.downstream, pick.depth) == (REMAINING, 1, 1)


def test_several_failures_take_the_first_full_pick_and_none_without_a_failed_step() -> None:
    st = states(CHAIN)
    pick = pick_for_failures(CHAIN, ["d", "a", "zz"], st, 0)
    assert pick is not None
    assert (pick.step_id, pick.action) == ("a", FULL)
    pick = pick_for_failures(CHAIN, ["d"], st, 0)
    assert pick is not None
    assert (pick.step_id, pick.action) == ("d", REMAINING)
    assert pick_for_failures(CHAIN, ["zz"], st, 0) is None
    assert pick_for_failures(CHAIN, [], st, 0) is None


def test_the_rule_policy_re_plans_a_fallback_with_the_scope_rules_pick() -> None:
    plan = Plan(steps=[s("a", fallback=[s("alt")]), s("b", "a")])
    failed = [Event(type=EventType.TASK_FAILED, severity=Severity.WARNING, step_id="a")]
    st = states(plan, a=StepStatus.FAILED)

    def scope(replans: int) -> object:
        return lambda step_id: pick_replan_scope(plan, step_id, st, replans)

    first = rule_verdict(failed, plan.by_id, scope(0))  # type: ignore[arg-type]
    assert first.choice.action == REMAINING
    assert "scope rule: REPLAN_REMAINING (1 of 2 steps downstream of a" in first.choice.reasoning
    third = rule_verdict(failed, plan.by_id, scope(2))  # type: ignore[arg-type]
    assert third.choice.action == FULL
    assert "2 re-plans so far" in third.choice.reasoning
    assert rule_verdict(failed, plan.by_id).choice.action == REMAINING  # no rule given


def test_the_situation_report_tells_the_decider_the_scope_rules_pick() -> None:
    pick = pick_replan_scope(CHAIN, "a", states(CHAIN), 0)
    assert isinstance(pick, ScopePick)
    situation = Situation(
        goal="g",
        constraints=(),
        steps=(),
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="t",
        scope_pick=pick.reason,
    )
    text = render_situation(situation)
    assert (
        "Scope rule (full or incremental re-plan): REPLAN_FULL (4 of 5 steps downstream of a, "
        "4 levels deep, 0 re-plans so far)." in text
    )
    assert "Scope rule" not in render_situation(
        Situation(
            goal="g",
            constraints=(),
            steps=(),
            events=(),
            replans_used=0,
            max_replans=3,
            trigger="t",
        )
    )
