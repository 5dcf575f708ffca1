"""Running a supervisor process: signals, tracing, the GIL slice, the heap, ``/metrics``."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import sys

from planloop.config.settings import Settings
from planloop.core import metrics, tracing
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.redis_client import redis_address
from planloop.core.routing import queue_lengths
from planloop.supervisor.process.service import Supervisor

log = logging.getLogger(__name__)

GIL_SWITCH_INTERVAL_S = 0.0005
FULL_GC_AFTER = 100  # young-generation passes between full ones (CPython's default: 10)


def serve(settings: Settings) -> None:
    """Run a supervisor until SIGINT or SIGTERM (exit code 0).

    Redis unreachable, restarting, loading or losing its data is never a reason to exit.
    The process exits with code 1 (and the traceback) only when it cannot go on: Redis
    refuses its credentials or permissions, Redis answers an error that is not a fault (a
    script or type error: a bug or a foreign key in our prefix), or the lease keeper died.
    """
    import signal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        supervisor = Supervisor(settings)
        settle_heap()
        await supervisor.run(stop)

    serve_metrics(settings)
    tracing.configure(settings, "planloop-supervisor")
    # The SQL thread must not hold the event loop off for the default 5 ms GIL slice: a
    # step's dependents are dispatched from the loop.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    asyncio.run(main())


def settle_heap() -> None:
    """Keep the garbage collector's full passes off a busy event loop.

    A full collection walks every object the process holds: with a thousand sessions
    loaded it stopped the event loop for 100-300 ms, and while the heap grows (a burst of
    sessions) CPython starts one each time it grew by a quarter: eleven in one run of
    bench/sessions.py, most of them in its bursts. So what start-up made (modules, the
    Celery app, the SQL engine and metadata) is frozen out of every later pass, and a full
    pass waits for ten times as many young ones as CPython's default. An ended session's
    objects refer to each other (its loop and its collaborators' ports), so a full pass is
    what frees them: they wait longer for it, not forever.
    """
    gc.freeze()
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_GC_AFTER)


def serve_metrics(settings: Settings) -> None:
    """Serve the supervisor's ``/metrics`` (when its port is set), pricing LLM calls by the
    settings' prices."""
    metrics.PRICES.update(settings.llm_prices)
    if not settings.supervisor_metrics_port:
        return
    client, keys = connect(redis_address(settings)), Keys(settings.key_prefix)
    depth = metrics.QueueDepth(queue_lengths(client, keys, settings.queue))
    active = metrics.ActiveSessions(lambda: int(client.scard(keys.active)))
    owner = f"{socket.gethostname()}:{os.getpid()}:{settings.supervisor_metrics_port}"
    shared = metrics.SharedGauges(
        client, keys.shared_metrics, owner, settings.metrics_shared_lease_s, [depth, active]
    )
    try:
        metrics.serve(settings.supervisor_metrics_port, settings.metrics_address, extra=[shared])
    except OSError as exc:
        log.warning(
            "metrics: cannot listen on %s:%d (%s); this supervisor serves no /metrics, give "
            "each supervisor on a host its own PLANLOOP_SUPERVISOR_METRICS_PORT",
            settings.metrics_address,
            settings.supervisor_metrics_port,
            exc,
        )
        return
    log.info(
        "metrics on http://%s:%d/metrics",
        settings.metrics_address,
        settings.supervisor_metrics_port,
    )
