"""The results under a size budget: as they are, the compressor's map-reduce, the ladder."""

from __future__ import annotations

import json
from collections import deque
from typing import Any, TypeVar

from pydantic import BaseModel

from planloop.core.errors import LLMUnavailableError
from planloop.planner.answer_shape import SENTENCES, answer_shape
from planloop.planner.context import (
    LADDER,
    Compressor,
    Notes,
    StepNote,
    StepResult,
    chunks,
    fit_results,
    ladder,
    merge_notes,
)
from planloop.planner.llm import Role, Usage
from planloop.planner.situation import Situation, StepView, render_situation
from planloop.planner.summarizer import Summarizer

T = TypeVar("T", bound=BaseModel)


class ScriptedChat:
    """Answers the compressor from a queue (an exception in it is raised), recording prompts."""

    def __init__(self, *replies: dict[str, Any] | Exception) -> None:
        self.replies = deque(replies)
        self.asked: list[tuple[Role, str]] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        self.asked.append((role, messages[0]["content"] + messages[1]["content"]))
        reply = self.replies.popleft()
        if isinstance(reply, Exception):
            raise reply
        return schema.model_validate(reply), Usage(100, 20, 0.0, "m", str(role))


def result(i: int, size: int = 900, status: str = "completed") -> StepResult:
    return StepResult(
        id=f"s{i}",
        tool="bench.echo",
        title="",
        status=status,
        error="boom" if status == "failed" else "",
        output={"value": "x" * size, "n": i} if status == "completed" else None,
        has_output=status == "completed",
    )


def notes(*ids: str, fact: str = "") -> dict[str, Any]:
    return {
        "steps": [{"id": i, "status": "completed", "note": f"{i} found {i}"} for i in ids],
        "conclusions": ["stock is short"],
        "key_data": [fact] if fact else [],
        "open_questions": ["why is s1 late?"],
    }


def test_results_under_the_budget_go_in_as_they_are() -> None:
    results = [result(0, 50), result(1, 50, "failed")]
    fitted, usages = fit_results(
        results, goal="g", critique="", sensitive=(), budget_chars=5000, chat=ScriptedChat()
    )
    assert fitted.compressed == ""
    assert usages == []
    assert '- s0 (bench.echo): completed\n<data>{"value":"' in fitted.text
    assert "- s1 (bench.echo): failed; error: boom" in fitted.text


def test_the_ladder_takes_the_first_rung_that_fits_and_names_every_step() -> None:
    results = [result(i) for i in range(30)]
    for budget, expected in [(20_000, LADDER[0]), (5_000, LADDER[2]), (1_500, LADDER[3])]:
        fitted = ladder(results, (), budget)
        assert len(fitted.text) <= budget
        assert fitted.compressed == expected.how
        assert fitted.text.startswith("(Results compressed: all 30 step(s)")
        assert expected.how in fitted.text.splitlines()[0]  # the prompt says how
        assert all(f"- s{i} (bench.echo): completed" in fitted.text for i in range(30))
    assert "output keys: value, n" in ladder(results, (), 5_000).text


def test_past_the_last_rung_the_steps_are_listed_by_status_never_dropped() -> None:
    results = [result(i) for i in range(60)] + [result(60, status="failed")]
    fitted = ladder(results, (), 1000)
    assert fitted.compressed == "steps listed by id and status only"
    assert "- failed (1): s60" in fitted.text
    assert all(f"s{i}," in fitted.text or f"s{i}\n" in fitted.text for i in range(59))


def test_the_ladder_masks_sensitive_fields_in_the_previews() -> None:
    secret = StepResult("pay", "t", "", "completed", output={"card": "4111"}, has_output=True)
    assert "4111" not in ladder([secret, *[result(i) for i in range(20)]], {"card"}, 20_000).text


def test_chunks_pack_entries_in_order_and_clip_a_giant() -> None:
    packed = chunks(["a" * 40, "b" * 40, "c" * 40, "d" * 500], 100)
    assert [len(c) for c in packed] == [2, 1, 1]
    assert packed[0] == ["a" * 40, "b" * 40]
    assert len(packed[2][0]) == 100
    assert packed[2][0].endswith("...")


def test_merged_notes_keep_every_chunks_lines_once() -> None:
    one = Notes(steps=[StepNote(id="a")], conclusions=["x"], key_data=["k1"])
    two = Notes(steps=[StepNote(id="b"), StepNote(id="a")], conclusions=["x", "y"])
    merged = merge_notes([one, two])
    assert [s.id for s in merged.steps] == ["a", "b"]
    assert (merged.conclusions, merged.key_data) == (["x", "y"], ["k1"])


def test_past_the_budget_the_compressor_reads_chunks_and_its_notes_name_every_step() -> None:
    results = [result(i) for i in range(12)]
    # the model's notes leave out s11: it is named anyway, with its status
    chat = ScriptedChat(*[notes(f"s{i}", fact=f"s{i}: 42 units") for i in range(11)], notes())
    fitted, usages = fit_results(
        results,
        goal="the goal",
        critique="NOT passed: s3 is wrong",
        sensitive=(),
        budget_chars=2_000,
        chat=chat,
    )
    assert len(chat.asked) > 1
    assert all(role == Role.COMPRESSOR for role, _ in chat.asked)
    assert len(usages) == len(chat.asked)  # every call's usage comes back to be recorded
    first = chat.asked[0][1]
    assert first.startswith("ROLE: compressor")
    assert "the goal" in first
    assert "NOT passed: s3 is wrong" in first  # the last critique, to keep its points
    assert "chunk 1 of" in first
    assert "compressor model summarised them in" in fitted.text.splitlines()[0]
    assert all(f"- s{i} (bench.echo): completed" in fitted.text for i in range(12))
    assert "s0 found s0" in fitted.text
    assert "s0: 42 units" in fitted.text
    assert "why is s1 late?" in fitted.text
    assert len(fitted.text) <= 2_000


def test_a_failing_compressor_falls_back_to_the_ladder_with_the_usage_it_spent() -> None:
    results = [result(i) for i in range(12)]
    down = LLMUnavailableError("HTTP 500", base_url="http://x", status=500)
    chat = ScriptedChat(notes("s0"), down)
    fitted, usages = fit_results(
        results, goal="g", critique="", sensitive=(), budget_chars=2_000, chat=chat
    )
    assert len(usages) == 1  # the first chunk was answered: its tokens count
    assert "the compressor failed: HTTP 500, so" in fitted.text.splitlines()[0]
    assert all(f"- s{i} (bench.echo): completed" in fitted.text for i in range(12))


def test_answer_shape_follows_the_goals_words() -> None:
    assert answer_shape("What is 2 + 2?") == SENTENCES
    report = answer_shape("Analyse SKU12345 and advise on stock and pricing")
    assert "heading" in report
    assert "## Recommendations" in report
    assert "figures" in report
    assert "Markdown table" in answer_shape("Put the stock levels in a table")
    assert "side by side" in answer_shape("Compare supplier A versus supplier B")
    assert "Markdown list" in answer_shape("List the suppliers of SKU1")
    assert answer_shape("Should we restock?").startswith(SENTENCES + "; end with concrete advice")
    assert "## Recommendations" in answer_shape("给出SKU12345的库存报告")
    assert answer_shape("a stable tablet") == SENTENCES  # whole words only


def test_the_summarizer_asks_for_the_goals_shape_with_or_without_a_schema() -> None:
    for schema in (None, {"type": "object"}):
        chat = ScriptedChat({"text": "# Report", "data": {}})
        Summarizer(chat).answer("Write a report on stock", "- s (t): completed", "", schema)
        prompt = chat.asked[0][1]
        assert "## Recommendations" in prompt
        assert "a few sentences" not in prompt
        expected = json.dumps(schema, indent=1) if schema else "(none: data is null)"
        assert expected in prompt


def situation(*steps: StepView) -> Situation:
    return Situation(
        goal="the goal",
        constraints=(),
        steps=steps,
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="TASK_FAILED: s9",
        last_feedback="critic: s3 is wrong",
    )


def view(i: int, status: str = "completed", size: int = 900) -> StepView:
    output = {"value": "x" * size} if status == "completed" else None
    return StepView(f"s{i}", "bench.echo", "", status, 1, output=output)


def test_a_situation_past_the_budget_shows_the_compressors_notes_on_every_step() -> None:
    s = situation(*[view(i) for i in range(8)], view(9, "failed"))
    chat = ScriptedChat(notes("s0", fact="s0: 42 units"), notes("s5"))
    fitted, usages = Compressor(chat).compress_situation(s, 4_000)
    assert len(usages) == 2  # two chunks of 4,000 characters
    assert "critic: s3 is wrong" in chat.asked[0][1]  # the last feedback is kept
    report = render_situation(fitted, budget_chars=6_000)
    assert "(Outputs compressed: the 8 completed steps' outputs" in report
    assert all(f"- s{i} (bench.echo): completed" in report for i in range(8))
    assert "s0: 42 units" in report
    assert "- s9 (bench.echo): failed" in report  # open steps stay as they were
    assert "x" * 900 not in report


def test_a_situation_under_the_budget_is_not_compressed() -> None:
    s = situation(view(0, size=100))
    chat = ScriptedChat()
    assert Compressor(chat).compress_situation(s, 4_000) == (s, [])
    assert chat.asked == []


def test_a_situation_shortened_by_its_ladder_says_so() -> None:
    report = render_situation(situation(*[view(i) for i in range(20)]), budget_chars=3_000)
    assert "(Outputs shortened to fit 3000 characters:" in report
    assert "No completed step is left out." in report
