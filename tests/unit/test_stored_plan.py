"""A stored plan the producer validated (its digest noted in the session hash) is read
without the limits' walk; any other text, or a digest that does not match, is validated."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from planloop.core.hot_state import PLAN_CHECKED_FIELD, blob_digest, plan_checked
from planloop.planner.plan import Plan, Step, load_stored_plan

GOOD = Plan(goal="g", steps=[Step(id="a", tool="t.a", params={"x": 1})]).model_dump_json(
    exclude_defaults=True
)
# A text no producer would store: a control character in a step's title breaks a limit.
BAD = json.dumps({"goal": "g", "steps": [{"id": "a", "tool": "t.a", "title": "be\u0007ll"}]})


def test_a_plan_read_back_is_the_same_checked_or_not() -> None:
    assert (
        load_stored_plan(GOOD, checked=True)
        == load_stored_plan(GOOD)
        == Plan.model_validate_json(GOOD)
    )


def test_a_plan_not_marked_checked_is_validated() -> None:
    with pytest.raises(ValidationError, match=r"plan_limit|control"):
        load_stored_plan(BAD)
    assert not plan_checked({}, BAD)


def test_the_mark_holds_only_for_the_very_text_it_was_made_for() -> None:
    fields = {PLAN_CHECKED_FIELD: blob_digest(GOOD)}
    assert plan_checked(fields, GOOD)
    assert not plan_checked(fields, BAD)  # another text: validated
    assert not plan_checked({PLAN_CHECKED_FIELD: ""}, GOOD)


def test_the_schema_is_kept_for_a_checked_text() -> None:
    broken = json.dumps({"goal": "g", "steps": []})  # at least one step
    with pytest.raises(ValidationError):
        load_stored_plan(broken, checked=True)
