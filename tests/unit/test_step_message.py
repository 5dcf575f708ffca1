"""Step message templates: a template filled in is the JSON text kombu would make of the same
message, and a per-message value the template cannot fill in fails when it is made (a Celery
or kombu upgrade that moves one). Equality with Celery's own messages on Redis, with a worker
consuming them: tests/integration/test_dispatch.py."""

from __future__ import annotations

import json

import pytest
from celery import Celery

from planloop.config.celery import STEP_TASK, celery_config
from planloop.config.settings import Settings
from planloop.core.errors import DispatchError
from planloop.supervisor.io.step_message import (
    ARGS,
    ARGSREPR,
    ID,
    SHADOW,
    TextTemplate,
    dumps,
)


def test_a_filled_template_is_the_json_of_the_filled_value() -> None:
    value = {"id": ID, "root_id": ID, "nested": {"argsrepr": ARGSREPR}, "n": 1, "none": None}
    template = TextTemplate.of(value, [ID, ARGSREPR], "test message")
    task_id, shown = 'S1:step "a":1', '[{"params": "\\u00e9"}]'
    text = template.render({ID: dumps(task_id), ARGSREPR: dumps(shown)})
    expected = {"id": task_id, "root_id": task_id, "nested": {"argsrepr": shown}, "n": 1}
    assert text == dumps({**expected, "none": None})
    assert json.loads(text)["nested"]["argsrepr"] == shown


def test_a_sentinel_inside_a_longer_text_cannot_be_filled() -> None:
    with pytest.raises(DispatchError, match="inside other fields"):
        TextTemplate.of({"id": ID, "origin": f"from {ID}"}, [ID], "test message")


def test_a_missing_value_means_the_message_changed() -> None:
    with pytest.raises(DispatchError, match="gone"):
        TextTemplate.of({"id": "fixed"}, [ID], "test message")


def test_celerys_protocol_2_message_fills_like_as_task_v2_makes_it() -> None:
    """The per-task fields are where the template fills them: the headers of a message made
    from the probe's template equal those Celery makes for the real values."""
    app = Celery("planloop-test", set_as_current=False)
    app.conf.update(celery_config(Settings()))
    try:
        probe = app.amqp.as_task_v2(
            ID, STEP_TASK, [ARGS], {}, argsrepr=ARGSREPR, kwargsrepr="{}", shadow=SHADOW
        )
        args = {"session_id": "S1", "params": {"q": "x"}}
        real = app.amqp.as_task_v2(
            "S1:s:1",
            STEP_TASK,
            [args],
            {},
            argsrepr="[shown]",
            kwargsrepr="{}",
            shadow="planloop.step:bench.sleep",
        )
    finally:
        app.close()
    headers = TextTemplate.of(probe.headers, [ID, ARGSREPR, SHADOW], "headers")
    values = {
        ID: dumps("S1:s:1"),
        ARGSREPR: dumps("[shown]"),
        SHADOW: dumps(real.headers["shadow"]),
    }
    assert json.loads(headers.render(values)) == json.loads(dumps(real.headers))
    body = TextTemplate.of(probe.body, [ARGS], "body")
    assert json.loads(body.render({ARGS: dumps(args)})) == json.loads(dumps(real.body))
