"""The console's pure views: the one plan diff, kept LLM transcripts, the timeline's items."""

from __future__ import annotations

from planloop.console.timeline import timeline
from planloop.console.versions import version_view
from planloop.core.llm_transcript import clipped, transcript
from planloop.core.models import Event, EventType
from planloop.planner.plan import parse_plan
from planloop.planner.plan_diff import diff_plans
from planloop.producer.history import plan_diff

OLD = parse_plan(
    """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a], requires_approval: true}
  - {id: c, tool: bench.echo, params: {value: 3}, dependencies: [b]}
"""
)
NEW = parse_plan(
    """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a]}
  - {id: d, tool: bench.echo, params: {value: 4}, dependencies: [b]}
"""
)


def test_show_and_the_console_print_the_same_diff() -> None:
    diff = diff_plans(OLD, NEW)
    assert (diff.added, diff.removed) == (["d"], ["c"])
    assert diff.changed == {"b": ["requires_approval"]}  # a field show used to miss
    view = version_view([OLD, NEW], 2, "re-planned", {"c": "failed"}, frozenset())
    assert (
        view["diff"]
        == plan_diff(OLD, NEW)
        == [
            "+ d (bench.echo)",
            "- c (bench.echo)",
            "~ b: requires_approval changed",
        ]
    )
    (ghost,) = view["ghosts"]  # the failed step v2 dropped, with how it ended
    assert (ghost["id"], ghost["status"], ghost["version"]) == ("c", "failed", 1)
    assert ["b", "c"] in view["edges"]


def test_a_step_dropped_before_it_ran_is_not_drawn() -> None:
    view = version_view([OLD, NEW], 2, "", {"c": "pending"}, frozenset())
    assert view["ghosts"] == []


def test_transcripts_are_masked_cut_and_can_be_off() -> None:
    prompt, response = transcript(
        [{"role": "system", "content": "api_key=sk-123 ROLE: planner"}], "x" * 50, 20
    )
    assert prompt is not None
    assert "sk-123" not in prompt
    assert response == "x" * 20 + "\n… [30 more characters not kept]"
    assert clipped("anything", 0) is None


def test_the_timeline_puts_attempts_llm_calls_decisions_and_people_on_one_axis() -> None:
    attempts = {"a": [{"attempt": 1, "status": "running", "started_at": 12.0, "finished_at": 0}]}
    calls = [{"at": 11.0, "latency_s": 0.5, "role": "planner", "model": "m"}]
    decisions = [{"at": 13.0, "action": "CONTINUE", "source": "rule"}]
    events = [
        ("1-0", Event(type=EventType.EXTERNAL_SIGNAL, description="approve", occurred_at=14.0)),
        (
            "2-0",
            Event(
                type=EventType.EXTERNAL_SIGNAL,
                description="no worker",
                payload={"notice": "unserved"},
                occurred_at=15.0,
            ),
        ),
    ]
    tl = timeline({"created_at": 10.0}, attempts, calls, decisions, events)
    assert [i["kind"] for i in tl["items"]] == ["llm", "attempt", "decision", "human"]
    assert tl["items"][1]["end"] is None  # running: the page grows it to now
    assert (tl["created_at"], tl["finished_at"], tl["total_s"]) == (10.0, None, None)
