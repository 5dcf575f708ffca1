"""Pure helpers behind poison sessions: event reading, error texts, NUL-free SQL parameters."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from planloop.core.models import Event, EventType
from planloop.core.record.engine import without_nul
from planloop.supervisor.session.ports import describe_error, read_event


class Secretive(BaseModel):
    count: int


def test_an_event_with_a_time_that_is_not_finite_cannot_be_read() -> None:
    fields = Event(type=EventType.EXTERNAL_SIGNAL, description="x").to_fields()
    assert read_event(fields).description == "x"
    for bad in ("nan", "inf", "-inf"):
        with pytest.raises(ValueError, match=r"occurred_at(.|\n)*finite number"):
            read_event({**fields, "occurred_at": bad})


def test_error_texts_name_the_problem_without_the_raw_value() -> None:
    with pytest.raises(ValidationError) as caught:
        Secretive.model_validate({"count": "hunter2-secret"})
    text = describe_error(caught.value)
    assert text.startswith("ValidationError: count: ")
    assert "hunter2" not in text
    assert describe_error(OverflowError("timeout value is too large")) == (
        "OverflowError: timeout value is too large"
    )


def test_nul_is_replaced_in_every_shape_of_statement_parameters() -> None:
    params = [{"goal": "a\x00b", "n": 1}, ("c\x00", None)]
    assert without_nul(params) == [{"goal": "a\ufffdb", "n": 1}, ("c\ufffd", None)]
    untouched = {"goal": "plain"}
    assert without_nul(untouched) == untouched
