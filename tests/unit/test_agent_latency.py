"""The pure parts of bench/agent_latency.py: questions, plans, scripted replies, latency."""

from __future__ import annotations

import json
import re

import pytest

from bench.agent_latency import critical_path_s
from bench.qa_questions import TEMPLATES, Question, questions
from bench.token_llm import reply_for, reply_latency_s
from planloop.core.tools import ToolContext, load_tools
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.validation import validate_plan
from planloop.workers.toolsets.qa import QA_TOOLS, RELATIONS, fact

QUESTIONS = questions(21)
ACTION = re.compile(r"^Action: (\S+)\nAction Input: (\{.*\})$", re.MULTILINE)


def test_there_are_at_least_twenty_distinct_questions_over_every_template() -> None:
    assert len({q.text for q in QUESTIONS}) == len(QUESTIONS) >= 20
    assert len({q.qid for q in QUESTIONS}) == len(QUESTIONS)
    assert TEMPLATES == 7


@pytest.mark.parametrize("question", QUESTIONS, ids=lambda q: q.qid)
def test_each_plan_reply_is_a_valid_plan_of_the_questions_lookups(question: Question) -> None:
    tools = load_tools([QA_TOOLS])
    reply = CompactPlan.model_validate_json(question.plan_reply())
    plan = reply.to_plan(question.tagged, [])

    validate_plan(plan, tools)
    assert sorted(s.id for s in plan.steps) == sorted(x.id for x in question.lookups)
    written = {s.id: s for s in plan.steps}
    for step in question.plan().steps:
        assert written[step.id] == step.model_copy(update={"title": ""})
    # the steps that need no other step come first (they are dispatched while it streams)
    with_dependencies = [bool(s.dependencies) for s in plan.steps]
    assert with_dependencies == sorted(with_dependencies)


def test_comparison_plans_have_parallel_branches() -> None:
    first = QUESTIONS[0]  # two founders, then their birth years
    roots = [s.id for s in first.plan().steps if not s.dependencies]
    assert roots == ["f0", "f1"]
    assert critical_path_s(first) == pytest.approx(0.5 + 0.8)


@pytest.mark.parametrize("question", QUESTIONS[:7], ids=lambda q: q.qid)
def test_react_replies_call_the_same_lookups_one_by_one_then_answer(question: Question) -> None:
    values = question.values()
    calls = []
    for n in range(len(question.lookups)):
        action = ACTION.search(question.react_reply(n))
        assert action is not None, question.react_reply(n)
        calls.append((action[1], json.loads(action[2])["subject"]))
    final = question.react_reply(len(question.lookups))

    expected = [(x.tool, question.subject_of(x, values)) for x in question.ordered()]
    assert calls == expected
    assert final.endswith(f"Final Answer: {question.answer()}")


def test_facts_are_deterministic_and_chain() -> None:
    founder = fact("founder", "Acme")
    assert founder == fact("founder", " acme ")
    assert isinstance(founder, str)
    year = fact("birth_year", founder)
    assert isinstance(year, int)
    assert RELATIONS["birth_year"].low <= year < RELATIONS["birth_year"].high


def test_tools_have_fixed_latencies_in_the_benchmark_range() -> None:
    tools = load_tools([QA_TOOLS])
    assert {f"qa.{name}" for name in RELATIONS} <= set(tools.names())
    assert all(0.2 <= r.latency_s <= 1.0 for r in RELATIONS.values())


def test_a_lookup_answers_its_fact() -> None:
    tools = load_tools([QA_TOOLS])
    ctx = ToolContext(session_id="s", step_id="r", attempt=1, idempotency_key="s:r")
    out = tools.get("qa.release_year").run({"subject": "Dust"}, ctx)  # 0.2 s, the fastest
    assert out == {
        "subject": "Dust",
        "relation": "release_year",
        "value": fact("release_year", "Dust"),
    }


def test_reply_latency_is_per_call_plus_per_output_token() -> None:
    assert reply_latency_s(0) == pytest.approx(0.2)
    assert reply_latency_s(100) == pytest.approx(0.2 + 2.0)
    assert reply_latency_s(10, call_s=0.0, token_s=0.05) == pytest.approx(0.5)


def test_the_scripted_model_answers_by_role_and_turn() -> None:
    q = QUESTIONS[3]
    observed = [{"role": "user", "content": "Observation: {}"}] * 2

    assert reply_for("planner", q, []) == q.plan_reply()
    asked = [{"role": "user", "content": "... also write the final answer ..."}]
    assert json.loads(reply_for("critic", q, asked))["answer"] == q.joiner_reply()
    with_schema = [
        {"role": "user", "content": "also write the final answer; must fit this JSON schema"}
    ]
    assert json.loads(reply_for("critic", q, with_schema))["answer"]["text"] == q.joiner_reply()
    assert reply_for("react", q, observed) == q.react_reply(2)
    assert json.loads(reply_for("summarizer", q, []))["text"] == q.joiner_reply()
    assert json.loads(reply_for("critic", q, []))["passed"] is True
    with pytest.raises(LookupError, match="decider"):
        reply_for("decider", q, [])
