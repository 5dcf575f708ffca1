"""The round decision, the critic's verdict and the final answer, with the in-memory store
and a scripted chat model (no Redis, no HTTP)."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel
from rich.console import Console

from planloop.core.errors import LLMUnavailableError
from planloop.core.models import SessionOptions, SessionStatus, StepState, StepStatus
from planloop.planner.answer_schema import check_answer_schema
from planloop.planner.answer_step import ANSWER_TOOL
from planloop.planner.critic import Critique, answer_request
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan
from planloop.planner.summarizer import schema_problem
from planloop.producer.cli import read_answer_schema
from planloop.producer.views import print_conclusion
from planloop.supervisor.session.answer_text import results_text
from planloop.supervisor.session.rounds import Rounds, next_round
from planloop.supervisor.session.state import FINAL, SessionState
from tests.unit.loop_fixtures import Loop, run, step

T = TypeVar("T", bound=BaseModel)

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class ScriptedChat:
    """Answers each role from its queue of JSON-ready dicts."""

    def __init__(self, **replies: list[dict[str, Any]]) -> None:
        self.replies = {role: deque(r) for role, r in replies.items()}
        self.asked: list[tuple[str, list[dict[str, str]]]] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        self.asked.append((str(role), list(messages)))
        reply = self.replies[str(role)].popleft()
        return schema.model_validate(reply), Usage(10, 5, 0.0, "m", str(role))


def critique(passed: bool, feedback: str = "") -> dict[str, Any]:
    return {"passed": passed, "feedback": feedback, "missing": ["b's result"], "confidence": 0.7}


def ended_round(chat: ScriptedChat | None, **options: Any) -> tuple[Loop, Rounds]:
    """A one-step session whose step completed, about to end completed."""
    loop = Loop(Plan(goal="get a and b", steps=[step("a")]), a=StepStatus.COMPLETED)
    loop.state.info = loop.state.info.model_copy(update={"options": SessionOptions(**options)})
    loop.deliberation.chat = chat
    loop.state.outcome = (SessionStatus.COMPLETED, "")
    return loop, Rounds(loop.io, loop.changes, loop.deliberation)


@pytest.mark.parametrize(
    ("passed", "rounds_done", "max_rounds", "again"),
    [(False, 0, 3, True), (False, 2, 3, False), (True, 0, 3, False), (False, 0, 1, False)],
)
def test_a_round_follows_only_a_failed_verdict_with_rounds_left(
    passed: bool, rounds_done: int, max_rounds: int, again: bool
) -> None:
    verdict = Critique(passed=passed)
    assert next_round(verdict, rounds_done, max_rounds) is again
    assert next_round(None, 0, 3) is False  # no verdict (critic failed): the round stands


def test_a_failed_verdict_plans_the_next_round_as_a_new_plan_version() -> None:
    chat = ScriptedChat(
        critic=[critique(False, "b is missing")],
        replanner=[{"steps": [{"id": "b", "tool": "t.b", "dependencies": ["a"]}]}],
    )
    loop, rounds = ended_round(chat)

    run(rounds.review())

    state = loop.state
    assert state.outcome is None  # the session goes on
    assert (state.info.plan_version, state.info.rounds, state.info.replans) == (2, 1, 0)
    assert [s.id for s in state.plan.steps] == ["a", "b"]
    assert state.states["b"].status == StepStatus.PENDING
    assert state.states["a"].status == StepStatus.COMPLETED  # frozen
    assert loop.session_hash()["rounds"] == "1"
    replan_prompt = chat.asked[1][1][1]["content"]
    assert "b is missing" in replan_prompt
    assert [c["role"] for c in state.batch.llm_calls] == ["critic", "replanner"]


def test_a_passed_verdict_lets_the_session_end() -> None:
    loop, rounds = ended_round(ScriptedChat(critic=[critique(True)]))

    run(rounds.review())
    run(rounds.review())  # the same plan version is judged once

    assert loop.state.outcome == (SessionStatus.COMPLETED, "")
    assert rounds.critique is not None
    assert rounds.critique.passed


def test_out_of_rounds_the_session_ends_completed_with_the_verdict_not_passed() -> None:
    loop, rounds = ended_round(ScriptedChat(critic=[critique(False, "b")]), max_rounds=1)

    run(rounds.review())

    status, note = loop.state.outcome or (None, "")
    assert status == SessionStatus.COMPLETED
    assert "did not pass the results after 1 round(s)" in note
    rounds.deliberation.chat = ScriptedChat(summarizer=[{"text": "a done, b not", "data": None}])
    conclusion = run(rounds.conclusion(SessionStatus.ABORTED, "decider chose to abort"))
    assert conclusion["critique"]["passed"] is False
    assert conclusion["answer"]["partial"] is True  # an aborted session gets an answer too


def test_without_an_llm_nothing_is_judged_or_answered() -> None:
    loop, rounds = ended_round(None)

    run(rounds.review())

    assert loop.state.outcome == (SessionStatus.COMPLETED, "")
    assert run(rounds.conclusion(SessionStatus.COMPLETED)) == {}


def test_the_answer_is_repaired_until_it_fits_the_schema() -> None:
    chat = ScriptedChat(
        summarizer=[{"text": "seven", "data": {"n": "7"}}, {"text": "seven", "data": {"n": 7}}]
    )
    loop, rounds = ended_round(chat, answer_schema=SCHEMA)
    loop.state.outputs["a"] = {"n": 7}

    conclusion = run(rounds.conclusion(SessionStatus.COMPLETED))

    assert conclusion["answer"] == {
        "text": "seven",
        "data": {"n": 7},
        "schema_error": None,
        "partial": False,
        "source": "summarizer",
    }
    assert conclusion["rounds"] == 1
    repair = chat.asked[1][1][-1]["content"]
    assert "data at n: '7' is not of type 'integer'" in repair
    assert '<data>{"n":7}</data>' in chat.asked[0][1][1]["content"]


def test_an_answer_that_never_fits_keeps_its_text_and_says_why() -> None:
    bad = {"text": "seven", "data": {}}
    _loop, rounds = ended_round(ScriptedChat(summarizer=[bad, bad, bad]), answer_schema=SCHEMA)

    answer = run(rounds.conclusion(SessionStatus.COMPLETED))["answer"]

    assert (answer["text"], answer["data"]) == ("seven", None)
    assert "'n' is a required property" in answer["schema_error"]


def test_results_stay_within_their_budget() -> None:
    loop = Loop(Plan(steps=[step(f"s{i}") for i in range(50)]))
    for i in range(50):
        loop.state.outputs[f"s{i}"] = {"text": "x" * 500}

    text = results_text(loop.state, budget_chars=3000)

    assert len(text) <= 3000
    assert text.startswith("(Results compressed: all 50 step(s)")
    assert all(f"- s{i} (" in text for i in range(50))  # no step left out


def test_an_invalid_answer_schema_is_refused_with_the_reason() -> None:
    from planloop.core.errors import ConfigError

    with pytest.raises(ConfigError, match="not a valid JSON schema"):
        check_answer_schema({"type": "no-such-type"})
    assert schema_problem({"n": 1}, SCHEMA) is None


def test_an_invalid_schema_given_through_the_api_is_reported_not_raised() -> None:
    chat = ScriptedChat(summarizer=[{"text": "seven", "data": None}])
    _loop, rounds = ended_round(chat, answer_schema={"type": "no-such-type"})

    answer = run(rounds.conclusion(SessionStatus.COMPLETED))["answer"]

    assert answer["text"] == "seven"
    assert "not a valid JSON schema" in answer["schema_error"]


def test_the_report_view_shows_the_verdict_and_the_answer(tmp_path: Path) -> None:
    console = Console(record=True, width=120, color_system=None)
    report = {
        "rounds": 2,
        "critique": {"passed": False, "feedback": "b is missing"},
        "answer": {"text": "seven", "data": {"n": 7}, "schema_error": None},
    }

    print_conclusion(console, report)

    text = console.export_text()
    assert "critique after 2 round(s): NOT passed: b is missing" in text
    assert "answer: seven" in text
    assert 'answer data: {"n": 7}' in text


def test_the_report_view_marks_a_partial_answer_and_one_written_without_the_model() -> None:
    console = Console(record=True, width=160, color_system=None)
    partial = {"text": "a ran; b failed", "partial": True, "source": "summarizer"}
    account = {"text": "The session ended", "partial": True, "source": "planloop"}

    print_conclusion(console, {"answer": partial})
    print_conclusion(console, {"answer": account})

    text = console.export_text()
    assert "answer (partial: the session did not complete): a ran; b failed" in text
    assert (
        "answer (partial: the session did not complete; written without the model): The "
        "session ended"
    ) in text


def test_the_cli_reads_and_checks_an_answer_schema_file(tmp_path: Path) -> None:
    from planloop.core.errors import ConfigError

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(SCHEMA))
    bad.write_text('{"type": 5}')

    assert read_answer_schema(good) == SCHEMA
    with pytest.raises(ConfigError, match="not a valid JSON schema"):
        read_answer_schema(bad)


def test_a_new_owner_reports_the_verdict_its_predecessor_stored() -> None:
    chat = ScriptedChat(critic=[critique(False, "b")], summarizer=[{"text": "t", "data": None}])
    loop, rounds = ended_round(chat, max_rounds=1)
    run(rounds.review())
    taken = Rounds(loop.io, loop.changes, loop.deliberation)  # a takeover: nothing in memory

    conclusion = run(taken.conclusion(SessionStatus.FAILED))

    assert conclusion["critique"]["feedback"] == "b"


def test_a_new_owner_after_the_critics_answer_asks_neither_critic_nor_summarizer() -> None:
    passed = {**critique(True), "answer": {"text": "seven", "data": None}}
    chat = ScriptedChat(critic=[passed])
    loop, rounds = ended_round(chat)
    run(rounds.review())
    taken = Rounds(loop.io, loop.changes, loop.deliberation)  # a takeover before the session ended

    run(taken.review())
    conclusion = run(taken.conclusion(SessionStatus.COMPLETED))

    assert (conclusion["answer"]["text"], conclusion["answer"]["source"]) == ("seven", "critic")
    assert conclusion["critique"]["passed"] is True
    assert [role for role, _ in chat.asked] == ["critic"]  # once, by the former owner


def test_a_new_owner_applies_a_stored_failed_verdict_by_planning_the_next_round() -> None:
    chat = ScriptedChat(
        critic=[critique(False, "b is missing")],
        replanner=[{"steps": [{"id": "b", "tool": "t.b", "dependencies": ["a"]}]}],
    )
    loop, rounds = ended_round(chat)
    judged = loop.state.info.plan_version
    run(rounds._judge(0))  # the former owner got the verdict, then died before planning
    taken = Rounds(loop.io, loop.changes, loop.deliberation)

    run(taken.review())

    assert [role for role, _ in chat.asked] == ["critic", "replanner"]
    assert loop.state.outcome is None  # the next round runs
    assert loop.state.info.plan_version == judged + 1


def test_a_verdict_on_an_older_plan_version_is_not_reused() -> None:
    chat = ScriptedChat(critic=[critique(True), critique(True)])
    loop, rounds = ended_round(chat)
    run(rounds.review())
    loop.state.info = loop.state.info.model_copy(
        update={"plan_version": loop.state.info.plan_version + 1}
    )
    taken = Rounds(loop.io, loop.changes, loop.deliberation)

    run(taken.review())

    assert [role for role, _ in chat.asked] == ["critic", "critic"]


def test_a_goal_that_needs_no_tool_is_answered_with_no_plan() -> None:
    chat = ScriptedChat(summarizer=[{"text": "Paris", "data": None}])
    loop = Loop(Plan(steps=[step("a")]))
    loop.state = SessionState(loop.state.sid, loop.state.epoch)  # a goal, no plan loaded
    loop.state.info = loop.state.info.model_copy(update={"goal": "capital of France?"})
    loop.io.state = loop.state
    loop.deliberation.state = loop.state
    loop.deliberation.chat = chat
    rounds = Rounds(loop.io, loop.changes, loop.deliberation)

    rounds.answer_directly("the router found no tool needed")
    conclusion = run(rounds.conclusion(SessionStatus.COMPLETED))

    assert loop.state.outcome == (SessionStatus.COMPLETED, "")
    assert conclusion["answer"]["text"] == "Paris"
    asked = chat.asked[0][1][1]["content"]
    assert "capital of France?" in asked
    assert "no tool was used" in asked


def test_a_round_replaces_a_step_that_failed_for_good() -> None:
    chat = ScriptedChat(
        critic=[critique(False, "b failed; get b another way")],
        replanner=[{"steps": [{"id": "b2", "tool": "t.alt", "dependencies": ["a"]}]}],
    )
    loop = Loop(
        Plan(goal="get a and b", steps=[step("a"), step("b", "a", tool="t.b")]),
        a=StepStatus.COMPLETED,
        b=StepStatus.FAILED,
    )
    loop.state.states["b"].note = FINAL
    loop.deliberation.chat = chat
    loop.state.outcome = (SessionStatus.COMPLETED, "completed around failed steps: b")
    rounds = Rounds(loop.io, loop.changes, loop.deliberation)

    run(rounds.review())

    state = loop.state
    assert state.outcome is None
    assert [s.id for s in state.plan.steps] == ["a", "b2"]
    assert state.states["b2"].status == StepStatus.PENDING
    assert "b2" in state.candidates


# --- answers: an answer step, and the answer of a session that did not complete -------------
def answered_plan(chat: ScriptedChat, answer: dict[str, Any], **options: Any) -> Rounds:
    """A completed two-step session whose last step is an answer step that stated ``answer``."""
    plan = Plan(
        goal="how many?",
        steps=[step("a"), step("answer", "a", tool=ANSWER_TOOL, params={"text": "x"})],
    )
    loop = Loop(plan, a=StepStatus.COMPLETED, answer=StepStatus.COMPLETED)
    loop.state.info = loop.state.info.model_copy(update={"options": SessionOptions(**options)})
    loop.state.outputs.update({"a": {"n": 7}, "answer": answer})
    loop.deliberation.chat = chat
    loop.state.outcome = (SessionStatus.COMPLETED, "")
    return Rounds(loop.io, loop.changes, loop.deliberation)


def test_an_answer_step_is_the_answer_and_the_summarizer_is_not_asked() -> None:
    chat = ScriptedChat()
    rounds = answered_plan(chat, {"text": "seven", "data": {"n": 7}}, answer_schema=SCHEMA)

    answer = run(rounds.conclusion(SessionStatus.COMPLETED))["answer"]

    assert answer == {
        "text": "seven",
        "data": {"n": 7},
        "schema_error": None,
        "partial": False,
        "source": "answer_step",
    }
    assert chat.asked == []


def test_an_answer_step_that_breaks_the_schema_is_repaired_by_the_summarizer() -> None:
    chat = ScriptedChat(summarizer=[{"text": "seven", "data": {"n": 7}}])
    rounds = answered_plan(chat, {"text": "seven", "data": {"n": "7"}}, answer_schema=SCHEMA)

    answer = run(rounds.conclusion(SessionStatus.COMPLETED))["answer"]

    assert (answer["data"], answer["source"]) == ({"n": 7}, "summarizer")
    asked = chat.asked[0][1][1]["content"]
    assert "the plan's answer step stated data that does not fit" in asked
    assert "'7' is not of type 'integer'" in asked


def test_a_failed_session_gets_a_partial_answer_saying_what_failed() -> None:
    chat = ScriptedChat(summarizer=[{"text": "a ran; b failed", "data": {"n": 1}}])
    loop = Loop(Plan(goal="get a and b", steps=[step("a"), step("b")]), a=StepStatus.COMPLETED)
    loop.state.states["b"] = StepState(status=StepStatus.FAILED, error="boom")
    loop.state.info = loop.state.info.model_copy(
        update={"options": SessionOptions(answer_schema=SCHEMA)}
    )
    loop.deliberation.chat = chat
    rounds = Rounds(loop.io, loop.changes, loop.deliberation)

    undone = [{"step": "a", "status": "completed"}, {"step": "r", "iteration": 2, "status": "x"}]
    answer = run(rounds.conclusion(SessionStatus.FAILED, "critical step b failed", undone))[
        "answer"
    ]

    assert (answer["text"], answer["partial"], answer["source"]) == (
        "a ran; b failed",
        True,
        "summarizer",
    )
    assert answer["schema_error"] is None  # a partial answer is not held to the schema
    asked = chat.asked[0][1][1]["content"]
    assert "FAILED: critical step b failed; compensations: a undone, r turn 2 NOT undone" in asked
    assert "error: boom" in asked


def test_without_a_model_call_planloop_writes_its_own_account() -> None:
    class Down(ScriptedChat):
        def complete_json(self, role: Role, messages: Any, schema: Any) -> Any:
            raise LLMUnavailableError("endpoint down", base_url="http://x")

    loop = Loop(Plan(goal="g", steps=[step("a"), step("b")]), a=StepStatus.COMPLETED)
    loop.state.states["b"] = StepState(status=StepStatus.FAILED, error="boom")
    loop.deliberation.chat = Down()
    rounds = Rounds(loop.io, loop.changes, loop.deliberation)

    failed = run(rounds.conclusion(SessionStatus.FAILED, "b failed"))["answer"]

    assert (failed["partial"], failed["source"]) == (True, "planloop")
    assert failed["text"].startswith("The session ended FAILED: b failed.")
    assert "Completed: a." in failed["text"]
    assert "Errors: b: boom." in failed["text"]

    cancelled_chat = ScriptedChat()
    loop.deliberation.chat = cancelled_chat
    cancelled = run(rounds.conclusion(SessionStatus.CANCELLED, "stop"))["answer"]
    assert cancelled["source"] == "planloop"  # a cancel spends no more tokens
    assert cancelled_chat.asked == []


def test_a_passing_critic_of_a_complete_round_writes_the_answer_in_the_same_call() -> None:
    passed = {**critique(True), "answer": {"text": "seven", "data": {"n": 7}}}
    chat = ScriptedChat(critic=[passed])
    _loop, rounds = ended_round(chat, answer_schema=SCHEMA)

    run(rounds.review())
    conclusion = run(rounds.conclusion(SessionStatus.COMPLETED))

    assert conclusion["answer"]["text"] == "seven"
    assert (conclusion["answer"]["data"], conclusion["answer"]["source"]) == ({"n": 7}, "critic")
    assert "answer" not in conclusion["critique"]  # the verdict is stored alone
    assert [role for role, _ in chat.asked] == ["critic"]  # no summarizer call
    assert "also write the final answer" in chat.asked[0][1][1]["content"]
    assert '"n"' in chat.asked[0][1][1]["content"]  # with the schema the data must fit


def test_a_passing_verdict_in_the_short_form_carries_the_text_alone() -> None:
    chat = ScriptedChat(critic=[{"passed": True, "confidence": 0.9, "answer": "seven"}])
    _loop, rounds = ended_round(chat)

    run(rounds.review())
    conclusion = run(rounds.conclusion(SessionStatus.COMPLETED))

    assert (conclusion["answer"]["text"], conclusion["answer"]["source"]) == ("seven", "critic")
    assert conclusion["critique"] == {
        "passed": True,
        "feedback": "",
        "missing": [],
        "confidence": 0.9,
    }
    asked = chat.asked[0][1][1]["content"]
    assert '"answer": "..."' in asked  # no schema: the text alone is asked for
    assert "a few sentences" in asked  # the goal asks for no particular shape
    assert '{"passed": true, "confidence": 0.9}' in chat.asked[0][1][0]["content"]


def test_with_an_answer_schema_the_critic_is_asked_for_text_and_data() -> None:
    prompt = answer_request(SCHEMA)
    assert '"answer": {"text": "...", "data": ...}' in prompt
    assert "must fit this JSON schema" in prompt
    assert '"answer": "..."' in answer_request(None)


def test_the_critic_asks_for_the_answer_in_the_shape_the_goal_names() -> None:
    prompt = answer_request(SCHEMA, "Write a report on SKU12345's stock")
    assert "## Recommendations" in prompt
    assert "a few sentences" not in prompt
    assert "must fit this JSON schema" in prompt  # the shape and the schema, together


def test_a_critics_answer_that_breaks_the_schema_leaves_it_to_the_summarizer() -> None:
    passed = {**critique(True), "answer": {"text": "seven", "data": {"n": "7"}}}
    chat = ScriptedChat(critic=[passed], summarizer=[{"text": "seven", "data": {"n": 7}}])
    _loop, rounds = ended_round(chat, answer_schema=SCHEMA)

    run(rounds.review())
    answer = run(rounds.conclusion(SessionStatus.COMPLETED))["answer"]

    assert (answer["data"], answer["source"]) == ({"n": 7}, "summarizer")


def test_a_round_with_a_failed_step_is_judged_without_asking_for_the_answer() -> None:
    chat = ScriptedChat(critic=[critique(True)], summarizer=[{"text": "t", "data": None}])
    loop = Loop(Plan(goal="g", steps=[step("a"), step("b")]), a=StepStatus.COMPLETED)
    loop.state.states["b"] = StepState(status=StepStatus.FAILED, error="boom")
    loop.deliberation.chat = chat
    loop.state.outcome = (SessionStatus.COMPLETED, "")
    rounds = Rounds(loop.io, loop.changes, loop.deliberation)

    run(rounds.review())
    run(rounds.conclusion(SessionStatus.COMPLETED))

    assert "(not asked: judge only)" in chat.asked[0][1][1]["content"]
    assert [role for role, _ in chat.asked] == ["critic", "summarizer"]
