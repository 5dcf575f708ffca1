"""The bare Celery driver: DAGs run as stock Celery tasks, each result releasing its dependents.

No Planloop on the path: :mod:`bench.bare_tasks` runs on kombu's own Redis transport with
Planloop's Celery settings. Each finished task pushes its step's timestamps to one Redis list;
the driver blocks on that list and sends every dependent the result released at once, for
``in_flight`` DAGs at a time, starting the next DAG as one ends. It is the reference for how
soon stock Celery on the same worker can start a step whose dependencies are done.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from celery import Celery

from bench.bare_tasks import SLEEP_TASK, stock_celery_config
from bench.common import BenchEnv

# step id -> (seconds, dependencies)
TimedDag = dict[str, tuple[float, list[str]]]


class StepTimes(Protocol):
    """Where the driver writes each step's timestamps (epoch seconds)."""

    dispatched: dict[str, float]
    started: dict[str, float]
    finished: dict[str, float]


class BareRunError(RuntimeError):
    """No task finished within the wait: the bare worker is stuck or gone."""

    def __init__(self, tag: str, waiting_steps: int, timeout_s: float) -> None:
        super().__init__(
            f"bare Celery run {tag}: no completion within {timeout_s:g}s "
            f"({waiting_steps} steps not finished)"
        )
        self.tag = tag
        self.waiting_steps = waiting_steps
        self.timeout_s = timeout_s


@contextmanager
def bare_sender(bench: BenchEnv) -> Iterator[Celery]:
    """A Celery app that only sends: the stock configuration the bare worker runs."""
    sender = Celery("bench-driver", set_as_current=False)
    sender.conf.update(stock_celery_config(bench.settings))
    try:
        yield sender
    finally:
        sender.close()


def _dependents(dag: TimedDag) -> dict[str, list[str]]:
    dependents: dict[str, list[str]] = {s: [] for s in dag}
    for s, (_, deps) in dag.items():
        for d in deps:
            dependents[d].append(s)
    return dependents


def drive_bare(
    bench: BenchEnv,
    sender: Celery,
    dags: Sequence[TimedDag],
    runs: Sequence[StepTimes],
    *,
    in_flight: int,
    tag: str,
    timeout_s: float,
) -> None:
    """Run ``dags[i]`` into ``runs[i]``, ``in_flight`` DAGs at once, event-driven on results.

    1. Start DAGs until ``in_flight`` run: send their roots.
    2. Block for the next result; record its step's start and end.
    3. Send each dependent whose last dependency this was (its ``dispatched`` stamped
       right before the send); a DAG whose every step finished frees its slot. Repeat.

    A task's step id is ``"<dag index>:<step>"``; every DAG of the call shares one list.
    """
    done_list = f"{bench.settings.key_prefix}:bare:done:{tag}"
    waiting = [{s: set(deps) for s, (_, deps) in dag.items()} for dag in dags]
    dependents = [_dependents(dag) for dag in dags]
    todo = deque(range(len(dags)))
    running = 0
    left = sum(len(dag) for dag in dags)

    def send(index: int, step: str) -> None:
        runs[index].dispatched[step] = time.time()
        seconds = dags[index][step][0]
        sender.send_task(
            SLEEP_TASK, args=[done_list, f"{index}:{step}", seconds], queue=bench.settings.queue
        )

    while left:
        while todo and running < in_flight:
            index = todo.popleft()
            running += 1
            for s in [s for s, deps in waiting[index].items() if not deps]:
                send(index, s)
        item = bench.redis.blpop([done_list], timeout=timeout_s)
        if item is None:
            raise BareRunError(tag, left, timeout_s)
        done = json.loads(item[1])
        head, _, step = str(done["step"]).partition(":")
        index = int(head)
        runs[index].started[step] = done["started_at"]
        runs[index].finished[step] = done["finished_at"]
        left -= 1
        for child in dependents[index][step]:
            waiting[index][child].discard(step)
            if not waiting[index][child]:
                send(index, child)
        if len(runs[index].finished) == len(dags[index]):
            running -= 1
