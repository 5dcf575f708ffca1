"""The settings of workers and the steps they run.

One group of fields of :class:`planloop.config.settings.Settings`, the one class that reads
them from the environment.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode


class WorkerSettings(BaseModel):
    """The ``PLANLOOP_*`` fields of workers and the steps they run."""

    # --- Workers -------------------------------------------------------------------------
    queue: str = Field(
        "planloop",
        description="The deployment's queue name: workers of this name consume pool queues "
        "derived from it (<queue>.<toolsets>.<hash>, one per distinct tool set) and the "
        "supervisor routes each step to one (core/routing.py). Default planloop.",
    )
    worker_queues: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Queues a worker consumes besides its derived pool queue (planloop worker "
        "--queues a,b): a comma list or a JSON list. Steps reach them only by explicit "
        "routing (a step's queue:, PLANLOOP_TOOL_QUEUES). Default none.",
    )
    tool_queues: dict[str, str] = Field(
        default_factory=dict,
        description="Explicit routing, tool name -> queue, as JSON "
        '(\'{"acme.greet": "gpu"}\'): the supervisor sends that tool\'s steps to that queue '
        "whether or not a live worker consumes it. A step's own queue: wins. Default none.",
    )
    unserved_wait_s: float = Field(
        60.0,
        gt=0,
        description="Seconds a step whose tool no live worker serves (and with no explicit "
        "queue) waits for one before it fails with error kind unserved. Default 60.",
    )
    route_refresh_s: float = Field(
        1.0,
        gt=0,
        description="Seconds a supervisor routes by the worker heartbeats it last read before "
        "reading them again (at most once per period, on demand). Default 1.",
    )
    worker_concurrency: int = Field(8, ge=1, description="Threads (or processes) per worker.")
    worker_pool: Literal["threads", "prefork", "solo"] = Field(
        "threads", description="Celery pool; threads suit I/O-bound tools."
    )
    tool_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Extra modules to import for @tool registrations (besides entry points): "
        "a comma list (acme.tools,acme.more) or a JSON list. Workers serve them and publish "
        "their contracts; producers and supervisors use them only when no worker is live. "
        "A module that cannot be imported stops any command (exit 2). Default: none.",
    )
    worker_heartbeat_s: float = Field(
        5.0,
        gt=0,
        description="Seconds between a worker's heartbeats (pl:workers: its name and tools); "
        "a worker unheard of for three periods counts as gone, and producers and supervisors "
        "re-read the live tool catalogue this often. Default 5.",
    )

    # --- Steps ---------------------------------------------------------------------------
    default_step_timeout_s: float = Field(60.0, gt=0, description="Step timeout, seconds.")
    default_max_retries: int = Field(2, ge=0, description="Retries after the first attempt.")
    react_step_timeout_s: float = Field(
        300.0, gt=0, description="Timeout of an agent step without its own, seconds."
    )
    react_stall_repeats: int = Field(
        3,
        ge=0,
        description="Turns in a row an agent step may make the same call (tool and params) "
        "and get the same observation before it fails as stalled, a count (default 3; 0: "
        "never; at least 2 otherwise).",
    )
    react_stall_refusals: int = Field(
        3,
        ge=0,
        description="Tool calls in a row an agent step may have refused (a tool it may not "
        "use, params that do not fit) before it fails as stalled, a count (default 3; 0: "
        "never).",
    )
    max_step_timeout_s: float = Field(
        3600.0, gt=0, description="Longest timeout a step may declare, seconds."
    )
    retry_backoff_s: float = Field(0.2, ge=0, description="First retry delay, seconds.")
    retry_backoff_max_s: float = Field(10.0, ge=0, description="Retry delay cap, seconds.")
    watchdog_grace_s: float = Field(
        2.0,
        ge=0,
        description="Seconds past a started step's timeout before the supervisor declares "
        "the attempt lost and schedules the next one.",
    )
    late_effect_settle_s: float = Field(
        3600.0,
        gt=0,
        description="Seconds a worker waits for the session of a write that committed "
        "after its attempt's timeout to end, to settle it (kept, or compensated if the "
        "ending missed it); past that it stays pending in `planloop show` (default 3600).",
    )
    late_effect_sweep_s: float = Field(
        60.0,
        gt=0,
        description="Seconds between a worker's looks for late writes left pending longer "
        "than `late_effect_settle_s` (their worker stopped before settling them), to settle "
        "those whose sessions have ended (default 60).",
    )
