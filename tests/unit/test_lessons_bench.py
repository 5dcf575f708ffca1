"""bench/lessons.py's series on a few sessions: the shape of its figures (no timing)."""

from __future__ import annotations

from bench.lessons import FAMILIES, TwinChat, goals, main
from planloop.planner.llm import Role
from planloop.planner.plan import Plan


def test_goals_are_seeded_and_cover_the_families() -> None:
    assert goals(30, 3) == goals(30, 3)
    assert {g.family.name for g in goals(60, 3)} == {f.name for f in FAMILIES}


def test_the_twin_plans_the_right_approach_only_with_a_matching_lesson() -> None:
    goal = next(g for g in goals(50, 1) if g.family.name == "restock")
    prompt = "## Lessons from earlier sessions\n- {}\n## Tools\n"
    with_lesson = [{"role": "user", "content": prompt.format(goal.family.lesson)}]
    plan, _ = TwinChat(goal).complete_json(Role.PLANNER, with_lesson, Plan)
    assert plan.steps[0].tool == "supply_chain.alternative_suppliers"
    without = [{"role": "user", "content": prompt.format("(none)")}]
    plan, _ = TwinChat(goal).complete_json(Role.PLANNER, without, Plan)
    assert plan.steps[0].tool == "supply_chain.verify_supplier"


def test_the_bench_prints_both_series_and_retrieval_quality(capsys: object) -> None:
    figures = main(["--sessions", "24", "--labelled", "8", "--seed", "2"])
    assert figures["sessions"] == 24
    assert figures["lessons_stored"] >= 1
    assert figures["planned_with_lesson"] >= 1
    assert figures["with"][1] <= figures["without"][1]  # fewer re-plans with lessons
    precision, recall, _ = figures["embeddings"]
    assert 0.0 <= precision <= 1.0
    assert 0.0 <= recall <= 1.0
