"""Task events follow monitors: the probe asks at most every period, a worker's task group
goes on and off with the answer, and a probe Redis does not answer counts as a listener."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from planloop.core.errors import DispatchError
from planloop.core.event_listeners import (
    PROBE_ROUTING_KEY,
    UNANSWERED_S,
    EventListeners,
    probe,
)
from planloop.workers.consumer import Consumer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_answer_is_asked_again_only_after_the_period() -> None:
    answers, clock = [1, 0], Clock()
    listeners = EventListeners(lambda: answers.pop(0), every_s=0.5, clock=clock)
    assert listeners.listening()
    clock.now += 0.4
    assert listeners.listening()  # the same answer: not asked again
    assert answers == [0]
    clock.now += 0.1
    assert not listeners.listening()
    assert answers == []


def test_an_unanswered_probe_counts_as_a_listener_and_waits_longer() -> None:
    tries, clock = [0], Clock()

    def fails() -> int:
        tries[0] += 1
        raise redis.ConnectionError("down")

    listeners = EventListeners(fails, every_s=0.5, clock=clock)
    assert listeners.listening()
    clock.now += 1.0
    assert listeners.listening()
    assert tries == [1]  # not asked again within UNANSWERED_S
    clock.now += UNANSWERED_S
    listeners.listening()
    assert tries == [2]


class FakeChannel:
    """What probe() reads of a kombu channel: prepare_message and the publish-batch protocol."""

    def __init__(self, commands: list[tuple[str, str, str]]) -> None:
        self.commands = commands

    def prepare_message(self, body: str, *args: Any) -> dict[str, Any]:
        return {"body": body, "headers": args[3]}

    def basic_publish(
        self, message: dict[str, Any], exchange: str, routing_key: str, _publish_batch: Any
    ) -> None:
        for command in self.commands:
            _publish_batch.add(*command)
        self.published = (message, exchange, routing_key)


def test_the_probe_is_an_empty_batch_of_task_events_on_the_event_exchange() -> None:
    channel = FakeChannel([("publish", "/0.celeryev/task.multi", '{"body": "W10="}')])
    topic, payload = probe(channel, "celeryev", {"hostname": "w1"})
    assert (topic, payload) == ("/0.celeryev/task.multi", '{"body": "W10="}')
    message, exchange, routing_key = channel.published
    assert json.loads(message["body"]) == []  # receivers iterate a batch: nothing to do
    assert (exchange, routing_key) == ("celeryev", PROBE_ROUTING_KEY)


def test_a_probe_kombu_would_not_send_as_one_publish_is_refused() -> None:
    with pytest.raises(DispatchError, match="not one PUBLISH"):
        probe(FakeChannel([("lpush", "q", "m")]), "celeryev", {})


class FakeDispatcher:
    enabled = True

    def __init__(self, groups: set[str] | None) -> None:
        self.groups = groups


def _consumer(dispatcher: FakeDispatcher, answers: list[int]) -> Consumer:
    consumer = Consumer.__new__(Consumer)  # only what _follow_listeners reads
    consumer.event_dispatcher = dispatcher
    consumer._listeners = (dispatcher, EventListeners(lambda: answers.pop(0), every_s=0.0))
    return consumer


def test_a_workers_task_events_go_on_and_off_with_the_monitors() -> None:
    dispatcher = FakeDispatcher({"worker"})
    consumer = _consumer(dispatcher, [1, 0])
    consumer._follow_listeners()
    assert dispatcher.groups == {"worker", "task"}
    consumer._follow_listeners()
    assert dispatcher.groups == {"worker"}


def test_task_events_configured_on_for_good_are_left_alone() -> None:
    dispatcher = FakeDispatcher(None)  # no groups: Celery sends every group
    answers = [0]
    _consumer(dispatcher, answers)._follow_listeners()
    assert dispatcher.groups is None
    assert answers == [0]  # not even asked
