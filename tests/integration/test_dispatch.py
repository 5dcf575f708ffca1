"""Dispatching on real Redis: the messages are what ``Celery.send_task`` would send, and they
are queued only by a fenced write of the session's owner, together with the step state."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from planloop.config.celery import STEP_TASK, celery_config, step_task_name
from planloop.config.settings import Settings
from planloop.core.errors import FencedOutError
from planloop.core.keys import Keys
from planloop.core.lua import as_commands
from planloop.core.models import StepTaskArgs
from planloop.core.tools import load_tools
from planloop.supervisor.io.redis_store import SessionStore
from planloop.supervisor.io.step_message import Op
from planloop.supervisor.io.step_queue import Dispatcher

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

# Differ between any two sends: a fresh delivery tag, the Lamport clock, the send time.
PER_SEND = {"delivery_tag", "clock", "timestamp"}
# send_task also copies argsrepr/kwargsrepr into the message properties; workers and Flower
# read them from the headers (and the task-sent event), which both carry.
PROPERTY_COPIES = {"argsrepr", "kwargsrepr"}


@pytest.fixture
def settings(test_settings: Settings, redis_client: redis.Redis) -> Iterator[Settings]:
    queue = f"{test_settings.queue}-dispatch"
    yield test_settings.model_copy(update={"queue": queue})
    redis_client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


def _attempt(**changes: Any) -> StepTaskArgs:
    args = StepTaskArgs(
        session_id="S1",
        step_id="reserve",
        attempt=2,
        epoch=3,
        tool="supply_chain.reserve_stock",
        params={"sku": "SKU1", "quantity": 5, "api_token": "hunter2"},
        timeout_s=7.5,
        idempotency_key="S1:reserve",
        critical=True,
    )
    return args.model_copy(update=changes)


def _decoded(raw: str) -> dict[str, Any]:
    message = json.loads(raw)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def _without(value: Any, names: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, names) for k, v in value.items() if k not in names}
    return value


def _capture(
    client: redis.Redis, queue: str, sid: str, send: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What ``send()`` left in the queue (oldest first) and published as events of ``sid``."""
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(f"/{client.connection_pool.connection_kwargs.get('db', 0)}.celeryev/*")
    time.sleep(0.05)
    send()
    events = []
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.05)  # None also for the subscribe reply
        if message is None:
            continue
        event = _decoded(message["data"])
        body = event["body"]  # a worker's batch of events is a list: other tests'
        if isinstance(body, dict) and str(body.get("uuid", "")).startswith(f"{sid}:"):
            events.append(event)
    pubsub.close()
    queued = [_decoded(raw) for raw in reversed(client.lrange(queue, 0, -1))]
    client.delete(queue)
    return queued, events


def test_dispatch_commands_queue_what_send_task_would(
    settings: Settings, redis_client: redis.Redis, run_id: str
) -> None:
    tools = load_tools(settings.tool_modules)
    sid = f"{run_id}-S1"
    attempts = [
        _attempt(session_id=sid),
        _attempt(session_id=sid, step_id="order", tool="supply_chain.create_purchase_order"),
    ]
    dispatcher = Dispatcher(settings, tools)
    reference = Celery("planloop-supervisor", set_as_current=False)
    reference.conf.update(celery_config(settings))
    # The reply-to names the sending app and thread: the same for both.
    reference._local.oid = dispatcher.celery.thread_oid

    def with_send_task() -> None:
        for args in attempts:
            reference.send_task(
                STEP_TASK,
                args=[args.wire()],
                task_id=args.task_id,
                queue=settings.queue,
                argsrepr=dispatcher._shown(args),
                kwargsrepr="{}",
                shadow=step_task_name(args.tool),
            )

    held: list[tuple[str, str]] = []  # kombu's unacked entries the dispatch wrote

    def run(ops: list[Op]) -> None:
        pipe = redis_client.pipeline(transaction=False)
        for op in ops:
            for command, key, args in as_commands(*op):
                pipe.execute_command(command, key, *args)
                if command == "HSET":
                    held.append((key, args[0]))
        pipe.execute()

    try:
        ours, our_events = _capture(
            redis_client, settings.queue, sid, lambda: run(dispatcher.commands(*attempts))
        )
        theirs, their_events = _capture(redis_client, settings.queue, sid, with_send_task)
        # Each message is held from the dispatch: kombu's unacked entry of it, as kombu
        # writes one on receipt ([message, exchange, routing key]), without a second copy.
        entries = [json.loads(redis_client.hget(key, tag) or "null") for key, tag in held]
    finally:
        for key, tag in held:
            redis_client.hdel(key, tag)
        dispatcher.close()
        reference.close()

    assert [tag for _, tag in held] == [m["properties"]["delivery_tag"] for m in ours]
    for message, (entry, exchange, routing_key) in zip(ours, entries, strict=True):
        entry["body"] = json.loads(base64.b64decode(entry["body"]))
        assert entry == message
        assert (exchange, routing_key) == ("", settings.queue)

    assert len(ours) == len(theirs) == 2
    for theirs_message in theirs:
        for name in PROPERTY_COPIES:
            del theirs_message["properties"][name]
    assert [_without(m, PER_SEND) for m in ours] == [_without(m, PER_SEND) for m in theirs]
    assert [m["headers"]["id"] for m in ours] == [f"{sid}:reserve:2", f"{sid}:order:2"]
    assert ours[0]["body"][0] == [attempts[0].wire()]
    shown = json.loads(ours[0]["headers"]["argsrepr"])[0]
    assert shown["params"]["api_token"] != "hunter2"  # masked for Flower
    assert ours[1]["headers"]["shadow"] == "planloop.step:supply_chain.create_purchase_order"

    assert [e["body"]["type"] for e in our_events] == ["task-sent", "task-sent"]
    assert [_without(e, PER_SEND) for e in our_events] == [
        _without(e, PER_SEND) for e in their_events
    ]


def test_only_the_owner_queues_attempts(
    settings: Settings, redis_client: redis.Redis, run_id: str
) -> None:
    keys = Keys(settings.key_prefix)
    sid = f"{run_id}-dispatch"
    redis_client.hset(keys.session(sid), mapping={"status": "running", "epoch": 3})
    dispatcher = Dispatcher(settings, load_tools(settings.tool_modules))

    # Text that JSON escapes, carried through the fenced write's Lua (cjson) unchanged.
    note = 'restock 库存 "quoted" \\ back\\slash, emoji 😀, tab\t'
    params = {"sku": "SKU1", "quantity": 5, "note": note}

    async def dispatch(epoch: int) -> None:
        store = SessionStore.from_url(settings.redis_url, keys)
        args = _attempt(session_id=sid, epoch=epoch, params=params)
        try:
            await store.write(
                sid,
                epoch,
                [
                    store.step_write(sid, "reserve", status="running", epoch=epoch),
                    *dispatcher.commands(args),
                ],
            )
        finally:
            await store.r.aclose()

    try:
        with pytest.raises(FencedOutError):
            asyncio.run(dispatch(2))
        assert redis_client.llen(settings.queue) == 0, "a stale owner queued an attempt"
        assert not redis_client.exists(keys.step(sid, "reserve"))
        asyncio.run(dispatch(3))
        (raw,) = redis_client.lrange(settings.queue, 0, -1)
        queued = _decoded(raw)["body"][0][0]
        assert queued["epoch"] == 3
        assert queued["params"] == params
        assert redis_client.hget(keys.step(sid, "reserve"), "status") == "running"
    finally:
        dispatcher.close()
        redis_client.delete(keys.session(sid), keys.step(sid, "reserve"))


def test_fenced_writes_sent_together_are_fenced_each(
    settings: Settings, redis_client: redis.Redis, run_id: str
) -> None:
    """Writes of many sessions in one loop turn share a pipeline (supervisor/io/write_batch.py);
    each is still fenced by its own session's epoch: a stale one among them writes nothing
    and raises, the others land with their messages."""
    keys = Keys(settings.key_prefix)
    sids = [f"{run_id}-batch-{i}" for i in range(20)]
    stale = sids[7]
    for sid in sids:
        redis_client.hset(keys.session(sid), mapping={"status": "running", "epoch": 5})
    dispatcher = Dispatcher(settings, load_tools(settings.tool_modules))

    async def dispatch_all() -> list[BaseException | None]:
        store = SessionStore.from_url(settings.redis_url, keys)

        async def one(sid: str) -> None:
            epoch = 4 if sid == stale else 5
            args = _attempt(session_id=sid, epoch=epoch)
            await store.write(
                sid,
                epoch,
                [
                    store.step_write(sid, "reserve", status="running", epoch=epoch),
                    *dispatcher.commands(args),
                ],
            )

        try:
            return list(await asyncio.gather(*(one(s) for s in sids), return_exceptions=True))
        finally:
            await store.r.aclose()

    try:
        outcomes = asyncio.run(dispatch_all())
        assert [type(o).__name__ for o in outcomes] == [
            "FencedOutError" if s == stale else "NoneType" for s in sids
        ]
        queued = [
            _decoded(raw)["headers"]["id"] for raw in redis_client.lrange(settings.queue, 0, -1)
        ]
        assert sorted(queued) == sorted(f"{s}:reserve:2" for s in sids if s != stale)
        assert not redis_client.exists(keys.step(stale, "reserve"))
        assert all(
            redis_client.hget(keys.step(s, "reserve"), "status") == "running"
            for s in sids
            if s != stale
        )
    finally:
        dispatcher.close()
        for sid in sids:
            redis_client.delete(keys.session(sid), keys.step(sid, "reserve"))
        redis_client.delete(settings.queue)
