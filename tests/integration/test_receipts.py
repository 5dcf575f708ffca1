"""Step messages on real Redis: parked on receipt, held by the claim, acked by the outcome.

kombu's Redis transport keeps every received message in an "unacked" hash until its ack, so
a dead worker's messages come back after the visibility timeout. Planloop's transport
(workers/transport.py, core/receipts.py) moves those writes into the attempt's own scripts;
here each stage is checked against the hash itself, and against what a stopping worker puts
back in the queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection

from planloop.config.celery import STEP_TASK
from planloop.config.settings import Settings
from planloop.core.hot_state import HotState
from planloop.core.lua import as_commands
from planloop.core.models import Event, EventType, StepStatus, StepTaskArgs
from planloop.core.receipts import KOMBU_UNACKED, Receipt, receipts
from planloop.core.tools import load_tools
from planloop.supervisor.io.step_queue import Dispatcher
from tests.conftest import wait_for
from tests.integration.conftest import RunPlan

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]


@pytest.fixture
def settings(test_settings: Settings, redis_client: redis.Redis) -> Iterator[Settings]:
    queue = f"{test_settings.queue}-receipts"
    yield test_settings.model_copy(update={"queue": queue})
    redis_client.delete(queue, f"_kombu.binding.{queue}")


@pytest.fixture
def unacked(settings: Settings, redis_client: redis.Redis) -> Iterator[tuple[str, str]]:
    """A private unacked hash and index, so other tests' workers never touch these."""
    keys = (f"{settings.key_prefix}:receipts:unacked", f"{settings.key_prefix}:receipts:index")
    yield keys
    redis_client.delete(
        *keys, f"{settings.key_prefix}:receipts:mutex", f"{settings.key_prefix}:receipts:scratch"
    )


@pytest.fixture
def channel(settings: Settings, unacked: tuple[str, str]) -> Iterator[Any]:
    """A consuming channel of Planloop's transport, as a worker has."""
    hash_key, index_key = unacked
    connection = Connection(
        settings.redis_url,
        transport="planloop.workers.transport:Transport",
        transport_options={
            "unacked_key": hash_key,
            "unacked_index_key": index_key,
            "unacked_mutex_key": f"{settings.key_prefix}:receipts:mutex",
        },
    )
    channel = connection.channel()
    yield channel
    connection.release()


def _queue_step(
    settings: Settings, client: redis.Redis, sid: str, held_in: str | None = None
) -> StepTaskArgs:
    """Queue one attempt's message exactly as a supervisor dispatches it; the unacked entry
    the dispatch holds goes to ``held_in`` (default: a scratch hash no channel reads)."""
    args = StepTaskArgs(
        session_id=sid,
        step_id="s1",
        attempt=1,
        epoch=1,
        tool="bench.sleep",
        params={"seconds": 0},
        timeout_s=5,
        idempotency_key=f"{sid}:s1",
    )
    dispatcher = Dispatcher(settings, load_tools(settings.tool_modules))
    try:
        for op in dispatcher.commands(args):
            for command, key, values in as_commands(*op):
                if command == "HSET":
                    key = held_in or f"{settings.key_prefix}:receipts:scratch"
                client.execute_command(command, key, *values)
    finally:
        dispatcher.close()
    return args


def _running(hot_state: HotState, args: StepTaskArgs) -> None:
    """The step's hot state as the dispatch left it: running, this attempt, not started."""
    key = hot_state.keys.step(args.session_id, args.step_id)
    hot_state.r.hset(
        key,
        mapping={"status": "running", "attempt": args.attempt, "epoch": args.epoch},
    )


def _receive_and_claim(
    settings: Settings, client: redis.Redis, channel: Any, hot_state: HotState, sid: str
) -> tuple[StepTaskArgs, Any, Receipt, int]:
    """Queue an attempt, receive it on ``channel`` and claim it with its receipt, as a worker
    does; returns the attempt, the message, its receipt and the claim's result."""
    args = _queue_step(settings, client, sid)
    _running(hot_state, args)
    message = channel.basic_get(settings.queue)
    receipt = receipts.parked(message.delivery_tag)
    assert receipt is not None
    claimed = hot_state.start_attempt(
        args.session_id, args.step_id, attempt=1, epoch=1, worker="w1", receipt=receipt
    )
    receipts.held(receipt.tag)
    return args, message, receipt, claimed


def _event(args: StepTaskArgs) -> Event:
    return Event(
        type=EventType.TASK_COMPLETED,
        step_id=args.step_id,
        attempt=args.attempt,
        description="done",
    )


def test_a_step_message_is_parked_on_receipt_and_goes_back_when_the_worker_stops(
    settings: Settings,
    redis_client: redis.Redis,
    channel: Any,
    unacked: tuple[str, str],
    run_id: str,
) -> None:
    args = _queue_step(settings, redis_client, f"{run_id}-park")
    message = channel.basic_get(settings.queue)
    assert message.headers["task"] == STEP_TASK
    tag = message.delivery_tag
    assert receipts.parked(tag) is not None
    assert not redis_client.hexists(unacked[0], tag), "receipt wrote to Redis: a round trip"

    channel.qos.restore_unacked()  # what a stopping worker does with what it holds

    assert receipts.parked(tag) is None
    again = channel.basic_get(settings.queue)
    assert again is not None, "the parked message was lost"
    assert again.headers["id"] == args.task_id
    assert again.delivery_info["redelivered"]
    channel.qos.restore_unacked()


def test_the_claim_holds_the_message_and_the_outcome_acks_it(
    settings: Settings,
    redis_client: redis.Redis,
    channel: Any,
    unacked: tuple[str, str],
    hot_state: HotState,
    run_id: str,
) -> None:
    hash_key, index_key = unacked
    args, message, receipt, claimed = _receive_and_claim(
        settings, redis_client, channel, hot_state, f"{run_id}-hold"
    )

    assert claimed == 1
    entry, _exchange, routing_key = json.loads(redis_client.hget(hash_key, receipt.tag) or "")
    assert entry["headers"]["id"] == args.task_id
    assert routing_key == settings.queue
    assert redis_client.zscore(index_key, receipt.tag) == pytest.approx(time.time(), abs=60)

    event_id = hot_state.record_outcome(
        args.session_id,
        args.step_id,
        attempt=1,
        epoch=1,
        status=StepStatus.COMPLETED.value,
        event=_event(args),
        output={"slept": 0},
        receipt=receipt,
    )
    receipts.settle(receipt.tag)

    assert event_id
    assert not redis_client.hexists(hash_key, receipt.tag)
    assert redis_client.zscore(index_key, receipt.tag) is None
    message.ack()
    channel.qos.restore_unacked()
    assert redis_client.llen(settings.queue) == 0, "an acked message came back"


def test_a_stale_outcome_still_acks_its_message(
    settings: Settings,
    redis_client: redis.Redis,
    channel: Any,
    unacked: tuple[str, str],
    hot_state: HotState,
    run_id: str,
) -> None:
    args, message, receipt, _ = _receive_and_claim(
        settings, redis_client, channel, hot_state, f"{run_id}-stale"
    )

    event_id = hot_state.record_outcome(  # a takeover moved the session to epoch 2 meanwhile
        args.session_id,
        args.step_id,
        attempt=1,
        epoch=2,
        status=StepStatus.COMPLETED.value,
        event=_event(args),
        receipt=receipt,
    )

    assert event_id is None
    assert not redis_client.hexists(unacked[0], receipt.tag)
    receipts.settle(receipt.tag)
    message.ack()


def test_other_messages_are_held_by_kombu_on_receipt(
    settings: Settings, redis_client: redis.Redis, channel: Any, unacked: tuple[str, str]
) -> None:
    with Connection(settings.redis_url) as producer_connection:
        producer_connection.SimpleQueue(settings.queue).put({"not": "a step"})
    message = channel.basic_get(settings.queue)
    assert message is not None
    assert receipts.parked(message.delivery_tag) is None
    assert redis_client.hexists(unacked[0], message.delivery_tag)
    message.ack()
    assert not redis_client.hexists(unacked[0], message.delivery_tag)


def test_a_worker_leaves_no_unacked_entry_behind(
    run_plan: RunPlan, test_settings: Settings, redis_client: redis.Redis
) -> None:
    sid, record = run_plan(
        {
            "goal": "receipts end to end",
            "steps": [
                {"id": f"s{i}", "tool": "bench.sleep", "params": {"seconds": 0.01}}
                for i in range(20)
            ],
        }
    )
    assert record.status.value == "completed"

    def ours() -> list[str]:
        return [
            tag
            for tag, raw in redis_client.hscan_iter("unacked")
            # the routing key: the worker's pool queue (core/routing.py), under our queue
            if json.loads(raw)[2].startswith(f"{test_settings.queue}.")
            and json.loads(raw)[0]["headers"]["id"].startswith(f"{sid}:")
        ]

    wait_for(lambda: not ours(), timeout_s=5, what="the session's messages to be acked")


def test_a_dispatched_message_is_held_from_the_dispatch_and_its_claim_only_indexes_it(
    settings: Settings,
    redis_client: redis.Redis,
    unacked: tuple[str, str],
    hot_state: HotState,
    run_id: str,
) -> None:
    """Under kombu's default hash name the dispatch writes the entry with the message; the
    claim sends no second copy, and kombu restores the entry as one it wrote itself."""
    _, index_key = unacked
    connection = Connection(
        settings.redis_url,
        transport="planloop.workers.transport:Transport",
        transport_options={
            "unacked_index_key": index_key,  # other workers never restore from this index
            "unacked_mutex_key": f"{settings.key_prefix}:receipts:mutex",
        },
    )
    channel = connection.channel()
    args = _queue_step(settings, redis_client, f"{run_id}-held", held_in=KOMBU_UNACKED)
    _running(hot_state, args)
    try:
        message = channel.basic_get(settings.queue)
        receipt = receipts.parked(message.delivery_tag)
        assert receipt is not None
        assert receipt.held
        assert json.loads(redis_client.hget(KOMBU_UNACKED, receipt.tag) or "") == json.loads(
            receipt.entry
        )
        claimed = hot_state.start_attempt(
            args.session_id, args.step_id, attempt=1, epoch=1, worker="w1", receipt=receipt
        )
        receipts.held(receipt.tag)
        assert claimed == 1
        assert redis_client.zscore(index_key, receipt.tag) == pytest.approx(time.time(), abs=60)

        channel.qos.restore_unacked()  # the worker stops before the outcome
        again = channel.basic_get(settings.queue)
        assert again is not None
        assert again.headers["id"] == args.task_id
        assert again.delivery_info["redelivered"]
        channel.qos.restore_unacked()
    finally:
        redis_client.hdel(KOMBU_UNACKED, message.delivery_tag)
        connection.release()
