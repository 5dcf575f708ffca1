"""The platform floor of ``bench/sessions.py``: each submitted session's first message, sent by
plain Celery the moment its submit lands, with nothing of the supervisor in the way.

Run as a process of its own (like a supervisor): it reads the sessions inbox under a consumer
group of its own, and for each new session sends one ``planloop.step`` message for its first
step with ``Celery.send_task`` (one publish per message, as any Celery client does), then
notes the time it was sent (written to a hash the benchmark reads once all are sent, so the
note costs no round trip per message). The worker consumes these messages
and drops them (no supervisor owns the sessions: the claim refuses a stale epoch), so the
Redis, the worker and the submitter are those of the real run.

    python -m bench.floor_relay GROUP SENT_KEY COUNT

It sets ``SENT_KEY:ready`` once connected, before the first read.
"""

from __future__ import annotations

import sys
import time
from typing import Any, cast

from celery import Celery

from planloop.config.celery import STEP_TASK, celery_config
from planloop.config.settings import Settings
from planloop.core.heartbeat import read_heartbeats
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.models import StepTaskArgs
from planloop.core.routing import live_pools, route_step

READ_BLOCK_MS = 200
IDLE_EXIT_S = 60.0  # no new session for this long: the benchmark is gone


def relay(group: str, sent_key: str, count: int) -> None:
    settings = Settings()
    keys = Keys(settings.key_prefix)
    client = connect(settings.redis_url)
    app = Celery("planloop-floor", set_as_current=False)
    app.conf.update(celery_config(settings))
    app.connection_for_write().ensure_connection()  # connected before the first submit
    # The queue the supervisor would route bench.sleep to: the live worker's pool queue.
    pools = live_pools(read_heartbeats(client, keys), settings.queue, time.time())
    needs = ["bench.sleep"]
    queue = route_step(needs, tool=needs[0], step_queue=None, tool_queues={}, pools=pools)
    sent_at: dict[str, str] = {}
    last = time.monotonic()
    client.set(f"{sent_key}:ready", "1", ex=600)
    try:
        while len(sent_at) < count and time.monotonic() - last < IDLE_EXIT_S:
            reply = cast(
                list[Any],
                client.xreadgroup(
                    group, "floor", {keys.inbox: ">"}, count=count, block=READ_BLOCK_MS
                ),
            )
            for _stream, entries in reply or []:
                for _entry_id, fields in entries:
                    sid = fields.get("sid", "")
                    args = StepTaskArgs(
                        session_id=sid,
                        step_id="s0",
                        attempt=1,
                        epoch=0,  # owned by nobody: the worker drops it at its claim
                        tool="bench.sleep",
                        params={"seconds": 0},
                        timeout_s=60,
                        idempotency_key=f"{sid}:s0",
                    )
                    app.send_task(
                        STEP_TASK,
                        args=[args.model_dump(mode="json")],
                        task_id=args.task_id,
                        queue=queue or settings.queue,
                    )
                    sent_at[sid] = repr(time.time())
                    last = time.monotonic()
        if sent_at:
            client.hset(sent_key, mapping=sent_at)
    finally:
        app.close()
        client.close()


if __name__ == "__main__":
    relay(sys.argv[1], sys.argv[2], int(sys.argv[3]))
