"""The worker's composition root: what one worker process runs steps with, built from the
settings its Celery app was created with.

:func:`workers.app.create_app` gives its app a :class:`WorkerRuntime`; the step task reads it
from the app (``task.app.runtime``), so nothing in ``workers/`` reads the environment and the
settings passed to ``create_app`` are the ones the executor uses.

Fork-safe: the executor (its Redis clients, its SQL engine, its tool threads) is built on first
use in each process. A prefork child inherits the parent's runtime but none of its sockets or
threads: the first task in the child builds the child's own executor.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery import Celery

from planloop.config.settings import Settings
from planloop.core.effects import SqlEffectLedger
from planloop.core.hot_state import BreakerPolicy, HotState, RedisEffectCache, connect
from planloop.core.keys import Keys
from planloop.core.record import SqlRecord, make_engine
from planloop.core.redis_client import redis_address
from planloop.core.tools import load_tools
from planloop.core.values import ValueLimits
from planloop.planner.openai_chat import build_chat_model
from planloop.workers.executor import StepExecutor
from planloop.workers.late_effects import LateEffectSettler
from planloop.workers.react import AgentStepRunner

log = logging.getLogger(__name__)


class WorkerRuntime:
    """The settings of a worker and, per process, the executor built from them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()  # the threads pool's first tasks race to build it
        self._executor: StepExecutor | None = None
        self._pid = 0  # the process the executor was built in

    def executor(self) -> StepExecutor:
        """This process's executor, built on first use (again after a fork)."""
        pid = os.getpid()
        executor = self._executor
        if executor is not None and self._pid == pid:
            return executor
        with self._lock:
            if self._executor is None or self._pid != pid:
                self._executor, self._pid = build_executor(self.settings), pid
            return self._executor


def build_executor(settings: Settings) -> StepExecutor:
    """A step executor wired from ``settings``: Redis, tools, effect ledger, breaker policy,
    and the agent-step runner when an LLM endpoint is configured."""
    # Retries ride out a Redis outage, so an outcome is not lost to a blip.
    client = connect(redis_address(settings), retry_s=settings.worker_redis_retry_s)
    keys = Keys(settings.key_prefix)
    tools = load_tools(settings.tool_modules)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    log.info("worker %s ready with %d tools", worker, len(tools.names()))
    policy = BreakerPolicy(
        settings.breaker_failures, settings.breaker_window_s, settings.breaker_cooldown_s
    )
    # The cache has a client of its own: it answers or fails at once, never waits out an
    # outage (SQL has the answer).
    cache = RedisEffectCache(connect(redis_address(settings)), keys)
    effects = SqlEffectLedger.from_settings(settings, cache=cache)
    # A write that commits after its attempt's timeout is settled once its session ends.
    settler = LateEffectSettler(effects, tools, settings.late_effect_settle_s)
    effects.on_late = settler
    settler.start_sweeping(settings.late_effect_sweep_s)  # those a stopped worker left
    executor = StepExecutor(
        HotState(client, keys, blob_ttl_s=settings.blob_ttl_s),
        tools,
        effects,
        worker,
        policy,
        limits=ValueLimits.from_settings(settings),
        # within the watchdog's grace: the outcome comes before the attempt is deemed lost
        late_effect_wait_s=settings.watchdog_grace_s / 2,
    )
    if settings.llm_base_url is not None:  # without one, agent steps fail and say why
        executor.agents = AgentStepRunner(
            chat=build_chat_model(settings),
            state=executor.state,
            tools=tools,
            effects=effects,
            threads=executor.threads,
            breaker=policy,
            settings=settings,
            # Each turn's call is charged to the session in SQL as it arrives. No schema
            # check here: the supervisor migrates the record it shares with the workers.
            ledger=SqlRecord(make_engine(settings.database_url)),
        )
    return executor


class PlanloopCelery(Celery):  # type: ignore[misc]
    """A Celery app that carries its worker runtime (no global ``current_app`` lookups)."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        # workers.transport.AMQP: connection URIs name the redis scheme (Flower's Broker page).
        super().__init__("planloop", set_as_current=False, amqp="planloop.workers.transport:AMQP")
        self.runtime = runtime
