"""A session hash written past the producer (an old client, a script) whose fields do not
parse or break a bound every entry point enforces: ``SessionRecord.from_fields`` raises
our StoredSessionError naming the fields, never their values (the supervisor ends the
session failed with it, without a crash: tests/integration/test_hostile_inputs.py)."""

from __future__ import annotations

import json

import pytest

from planloop.core.errors import SessionInputRefusedError, StoredSessionError
from planloop.core.models import SessionOptions, SessionRecord

SECRET = "sk-planted-7f3a9c1e5b2d4086"


def fields(**overrides: str) -> dict[str, str]:
    return {"status": "pending", "goal": "g", "plan_version": "1", **overrides}


def test_a_well_formed_hash_loads() -> None:
    record = SessionRecord.from_fields("s1", fields(options=json.dumps({"concurrency": 4})))

    assert record.options.concurrency == 4


@pytest.mark.parametrize(
    ("stored", "names"),
    [
        ({"options": json.dumps({"concurrency": 10**26})}, "options.concurrency"),
        ({"options": '{"max_cost_usd": NaN}'}, "options: not JSON"),
        ({"options": f'{{"max_rounds": "{SECRET}"}}'}, "options.max_rounds"),
        ({"options": json.dumps({SECRET: 1})}, "options"),
        ({"options": f"not json {SECRET}"}, "options: not JSON"),
        ({"approved": json.dumps(SECRET)}, "approved"),
        ({"plan_version": SECRET}, "plan_version"),
        ({"status": SECRET}, "status"),
        ({"report": "[" * 100_000}, "report"),
    ],
    ids=[
        "concurrency-1e26",
        "cost-nan",
        "rounds-not-a-number",
        "unknown-option",
        "options-not-json",
        "approved-not-a-list",
        "plan-version-not-a-number",
        "status-unknown",
        "report-nested-too-deep",
    ],
)
def test_a_hash_that_breaks_the_input_check_is_refused_naming_the_field(
    stored: dict[str, str], names: str
) -> None:
    with pytest.raises(StoredSessionError) as caught:
        SessionRecord.from_fields("s1", fields(**stored))

    message = str(caught.value)
    assert message.startswith("session s1 cannot be loaded: its stored fields break the input")
    assert names in message
    assert SECRET not in message
    assert "input_value" not in message
    assert len(message.splitlines()) == 1


def test_the_error_is_a_refusal_and_a_value_error() -> None:
    # a refusal: the supervisor ends the session failed, without counting a crash; a
    # ValueError: a reader that tolerated pydantic's error on a bad hash still does
    assert issubclass(StoredSessionError, SessionInputRefusedError)
    assert issubclass(StoredSessionError, ValueError)


def test_a_view_reads_what_it_can_of_a_hash_that_does_not_load() -> None:
    stored = fields(
        status="failed",
        goal="kept",
        options=json.dumps({"concurrency": 10**26}),
        approved="not a list",
    )

    record = SessionRecord.readable("s1", stored)

    assert record.status.value == "failed"
    assert record.goal == "kept"
    assert record.options == SessionOptions()
    assert record.approved == []
    assert "cannot be loaded" in record.error
    assert "approved" in record.error or "options.concurrency" in record.error


def test_a_view_keeps_the_error_the_supervisor_wrote() -> None:
    stored = fields(status="failed", error="refused before it started", approved="[")

    assert SessionRecord.readable("s1", stored).error == "refused before it started"
