"""Before a plan is submitted: does a live worker serve every tool it uses (core/heartbeat.py)?"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import redis

from planloop.core.errors import NoLiveWorkerError
from planloop.core.heartbeat import Heartbeat, live_workers
from planloop.core.keys import Keys
from planloop.planner.plan import Plan, Step
from planloop.planner.react_step import REACT_TOOL

POLL_S = 0.25


def required_tools(plan: Plan) -> list[str]:
    """Every tool a plan may call: its steps', their fallbacks' and compensations', and the
    tools its agent steps may use (an agent step itself runs on any worker)."""
    names: set[str] = set()
    todo: list[Step] = list(plan.steps)
    while todo:
        step = todo.pop()
        if step.tool == REACT_TOOL:
            inner = step.params.get("tools")
            if isinstance(inner, list):
                names.update(str(t) for t in inner)
        else:
            names.add(step.tool)
        if step.compensate is not None:
            names.add(step.compensate.tool)
        todo.extend(step.fallback)
    return sorted(names)


def goal_tools(prefixes: list[str]) -> list[str]:
    """What a goal needs served: a tool of each toolset it names (``bench.*``), or any tool
    at all (``*``) when it names none."""
    return [f"{prefix}.*" for prefix in prefixes] or ["*"]


def unserved(tools: Iterable[str], workers: list[Heartbeat]) -> list[str]:
    """The tools of ``tools`` no worker of ``workers`` serves; ``toolset.*`` is served by any
    tool of the toolset, ``*`` by any tool."""
    served = {name for hb in workers for name in hb.tools}
    missing = []
    for tool in set(tools):
        if tool == "*":
            found = bool(served)
        elif tool.endswith(".*"):
            found = any(name.startswith(tool[:-1]) for name in served)
        else:
            found = tool in served
        if not found:
            missing.append(tool)
    return sorted(missing)


def wait_for_workers(
    client: redis.Redis,
    keys: Keys,
    queue: str,
    tools: list[str],
    *,
    wait_s: float = 0.0,
    on_wait: Callable[[list[str]], None] | None = None,
) -> None:
    """Return once live workers on ``queue`` serve all of ``tools``; wait up to ``wait_s``.

    ``on_wait`` is told the missing tools once, when waiting starts.

    Raises:
        NoLiveWorkerError: still not served after ``wait_s``; names the tools and the live
            workers' toolsets.
    """
    started = time.monotonic()
    told = False
    while True:
        workers = live_workers(client, keys, queue)
        missing = unserved(tools, workers)
        if not missing:
            return
        waited = time.monotonic() - started
        if waited >= wait_s:
            live = {hb.worker: hb.toolsets() for hb in workers}
            raise NoLiveWorkerError(missing, live, waited_s=round(waited, 1) if wait_s else 0)
        if not told and on_wait is not None:
            on_wait(missing)
            told = True
        time.sleep(POLL_S)  # polling the heartbeats, which workers refresh on their own
