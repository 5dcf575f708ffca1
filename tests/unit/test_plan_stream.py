"""Reading a streamed plan reply: each array step as soon as it is whole, whatever the pieces."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planloop.core.errors import PlanValidationError
from planloop.core.tools import load_tools
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.early_steps import EarlySteps, keep_installed
from planloop.planner.plan_stream import StepStream
from planloop.workers.toolsets.qa import QA_TOOLS

REPLY = (
    '{"steps":[\n'
    '["a","qa.capital",{"subject":"Nor]land \\"[x]\\" \\\\"}],\n'
    '["b","qa.population",{"subject":"{{a.output.value}}"}, ["a"], {"title":"}]{["}],\n'
    '["c","qa.capital",{"subject":"Estovia"},[]]\n'
    "]}"
)
STEPS = json.loads(REPLY)["steps"]


def feed_all(pieces: list[str]) -> tuple[StepStream, list[tuple[int, list[Any]]]]:
    """Feed ``pieces``; each step with the index of the piece that completed it."""
    stream = StepStream()
    seen = []
    for n, piece in enumerate(pieces):
        seen += [(n, step) for step in stream.feed(piece)]
    return stream, seen


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, len(REPLY)])
def test_steps_come_whole_whatever_the_chunk_boundaries(size: int) -> None:
    pieces = [REPLY[i : i + size] for i in range(0, len(REPLY), size)]
    stream, seen = feed_all(pieces)

    assert [step for _, step in seen] == STEPS
    assert stream.ended
    assert not stream.stopped


def test_every_split_point_gives_the_same_steps() -> None:
    for cut in range(1, len(REPLY)):
        _stream, seen = feed_all([REPLY[:cut], REPLY[cut:]])
        assert [step for _, step in seen] == STEPS, cut


def test_a_step_is_handed_over_with_its_closing_bracket_not_later() -> None:
    first_end = REPLY.index('],\n["b"') + 1  # just past the first step's closing bracket
    pieces = [REPLY[:first_end], REPLY[first_end:]]
    _, seen = feed_all(pieces)

    assert seen[0] == (0, STEPS[0])  # before the rest of the reply arrived


def test_brackets_and_escapes_inside_strings_do_not_end_a_step() -> None:
    _, seen = feed_all(list(REPLY))
    assert seen[0][1][2] == {"subject": 'Nor]land "[x]" \\'}
    assert seen[1][1][4] == {"title": "}]{["}


def test_object_form_steps_stop_the_early_steps_for_the_whole_reply() -> None:
    reply = '{"steps":[["a","qa.capital",{"subject":"X"}],{"id":"b","tool":"qa.capital"}]}'
    stream, seen = feed_all(list(reply))
    assert [step for _, step in seen] == [["a", "qa.capital", {"subject": "X"}]]
    assert "object" in stream.stopped
    assert stream.feed('["c","qa.capital",{}]') == []  # stopped for good


@pytest.mark.parametrize(
    "reply",
    [
        'Here is the plan: {"steps": [["a","qa.capital",{}]]}',
        '```json\n{"steps":[["a","qa.capital",{}]]}\n```',
        '{"goal":"g","steps":[["a","qa.capital",{}]]}',
        '{"steps":[["a","qa.capital",{}}]]}',
        '{"steps":[ 42 ]}',
    ],
)
def test_garbage_or_other_shapes_stop_without_steps(reply: str) -> None:
    stream, seen = feed_all(list(reply))
    assert seen == []
    assert stream.stopped


def test_whitespace_around_the_opening_is_read() -> None:
    _, seen = feed_all(list(' \n{ "steps" :\n [ ["a","qa.capital",{}] ] }'))
    assert [step for _, step in seen] == [["a", "qa.capital", {}]]


# --- early steps: which whole steps may run before the reply ends --------------------------
TOOLS = load_tools([QA_TOOLS])


def test_early_steps_grow_a_valid_prefix_that_the_whole_plan_keeps() -> None:
    early = EarlySteps("g", [], TOOLS)
    assert [early.accept(step) for step in STEPS] == [True, True, True]
    whole = CompactPlan.model_validate_json(REPLY).to_plan("g", [])

    assert early.plan == whole  # the same steps the whole reply makes
    assert keep_installed(whole, early.plan.steps, TOOLS) == whole


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (["b", "qa.no_such_tool", {"subject": "x"}], "no_such_tool"),
        (["b", "qa.capital", {"wrong": 1}], "b"),
        (["b", "qa.capital", {"subject": "{{z.output.value}}"}], "z"),
        (["a", "qa.capital", {"subject": "again"}], "a"),
        (["b"], "array"),
    ],
)
def test_a_step_that_cannot_run_yet_stops_the_early_steps(bad: list[Any], why: str) -> None:
    early = EarlySteps("g", [], TOOLS)
    assert early.accept(["a", "qa.capital", {"subject": "X"}])
    assert not early.accept(bad)
    assert why in early.stopped
    assert not early.accept(["c", "qa.capital", {"subject": "Y"}])  # stopped for good
    assert early.count == 1


def test_the_whole_plan_may_not_redefine_an_installed_step() -> None:
    installed = CompactPlan.model_validate_json(REPLY).to_plan("g", []).steps[:1]
    changed = CompactPlan.model_validate(
        {
            "steps": [
                ["a", "qa.capital", {"subject": "Other"}],
                ["d", "qa.capital", {"subject": "Y"}],
            ]
        }
    ).to_plan("g", [])
    with pytest.raises(PlanValidationError, match="already running"):
        keep_installed(changed, installed, TOOLS)
    left_out = CompactPlan.model_validate({"steps": [["d", "qa.capital", {"subject": "Y"}]]})
    merged = keep_installed(left_out.to_plan("g", []), installed, TOOLS)
    assert [s.id for s in merged.steps] == ["a", "d"]  # an installed step left out is kept
