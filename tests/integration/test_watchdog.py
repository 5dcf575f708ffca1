"""The watchdog with no worker consuming: one extra copy of an attempt at most, a warning
that `status` and `watch` show, and its all-clear once a worker starts.

An attempt is sent to a queue nobody consumes only by explicit routing (a step's ``queue:``)
or to a pool whose workers died with their heartbeats still fresh: with no worker at all, a
routed step waits unserved instead (tests/integration/test_pool_routing.py).
"""

from __future__ import annotations

import io
import subprocess

import pytest
from rich.console import Console

from planloop.core.models import EventType, Severity, task_id
from planloop.planner.plan import parse_plan
from planloop.producer.views import print_status
from planloop.producer.watch import watch_session
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack
from tests.shipped import shipped

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

PLAN = """
goal: one step nobody takes at first
steps:
  - {{id: only, tool: bench.sleep, params: {{seconds: 0}}, timeout_s: 1, queue: {queue}}}
"""
STILL_QUEUED = "unclaimed: its second copy is still queued"


def explicit_queue(ps: PrivateStack) -> str:
    """The queue the plan's step names (under the stack's prefix: wiped after the test)."""
    return f"{ps.settings.queue}.nobody"


def copies(ps: PrivateStack, attempt_id: str) -> int:
    """Messages of ``attempt_id`` in the step's Celery queue (a Redis list)."""
    needle = f'"id": "{attempt_id}"'
    return sum(1 for m in ps.redis.lrange(explicit_queue(ps), 0, -1) if needle in m)


def looks(ps: PrivateStack, what: str) -> int:
    """How many times the supervisors' logs say ``what`` (each watchdog look logs once)."""
    return sum(ps.supervisor_log(p).count(what) for p in ps.supervisors)


def status_text(ps: PrivateStack, sid: str) -> str:
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    print_status(ps.producer, sid, 20, console=console)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def cli_status(ps: PrivateStack, sid: str) -> str:
    """What `planloop status SID` prints."""
    done = subprocess.run(
        [*shipped().cli(), "status", sid],
        env=ps.stack.env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def watch_text(ps: PrivateStack, sid: str) -> str:
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    watch_session(ps.producer, sid, console=console, timeout_s=0.3)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_an_unconsumed_attempt_is_resent_once_warned_about_and_cleared(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(
        workers=0, watchdog_grace_s=0.5, no_consumer_warning_s=2.0, default_step_timeout_s=1
    )
    queue = explicit_queue(ps)
    sid = ps.producer.submit(parse_plan(PLAN.format(queue=queue)))
    attempt_id = task_id(sid, "only", 1)
    seen: list[int] = []

    def looked_again(times: int) -> bool:
        seen.append(copies(ps, attempt_id))
        return looks(ps, STILL_QUEUED) >= times

    # Several timeout + grace periods (1.5 s each) after the one re-send.
    wait_for(lambda: looked_again(3), 30, "three watchdog looks at the still-queued copy")
    assert max(seen) <= 2, f"copies of the attempt seen in the queue: {sorted(set(seen))}"
    assert copies(ps, attempt_id) == 2
    assert looks(ps, "unclaimed: re-sent") == 1

    # The warning: a progress note, a WARNING event that never triggers a decision, shown
    # by status and watch.
    notes = [n for _, n in ps.hot.progress(sid) if n.get("kind") == "no_consumer"]
    assert len(notes) == 1, f"one warning per episode, got {notes}"
    assert notes[0]["queue"] == queue
    warnings = [
        ev
        for _, ev in ps.hot.events(sid)
        if ev.type == EventType.EXTERNAL_SIGNAL and ev.payload.get("notice") == "no_consumer"
    ]
    assert len(warnings) == 1
    assert warnings[0].severity == Severity.WARNING
    assert f"no worker consumed queue {queue}" in warnings[0].description
    assert f"WARNING      no worker consumed queue {queue}" in status_text(ps, sid)
    assert f"no worker consumed queue {queue}" in cli_status(ps, sid)
    shown = watch_text(ps, sid)
    assert "WARNING note no_consumer" in shown
    assert f"no worker consumed queue {queue}" in shown
    assert not ps.hot.session(sid).deliberation.get("pending"), "the warning is no decision"

    # A takeover remembers the re-send: the next owner sends no third copy.
    ps.signal(ps.supervisors[0])  # SIGKILL
    ps.start_supervisor()
    before = looks(ps, STILL_QUEUED)
    wait_for(lambda: 2 in ps.takeovers(sid), 30, "the takeover")
    wait_for(lambda: looked_again(before + 1), 30, "the new owner's look at the queued copy")
    assert max(seen) <= 2, f"copies of the attempt seen in the queue: {sorted(set(seen))}"

    # A worker: the attempt runs once, the session completes, the warning is cleared.
    ps.start_worker(queues=[queue])
    record = ps.finish(sid, ["only"], timeout_s=60)
    assert record.status.value == "completed"
    kinds = [n.get("kind") for _, n in ps.hot.progress(sid)]
    assert "consumer_back" in kinds, f"no all-clear among the notes {kinds}"
    assert kinds.index("consumer_back") > max(i for i, k in enumerate(kinds) if k == "no_consumer")
    assert "WARNING" not in status_text(ps, sid)
    wait_for(lambda: copies(ps, attempt_id) == 0, 10, "the worker to drain the queue")
    attempts = [a for a in ps.record.attempts(sid) if a.step_id == "only"]
    assert [a.attempt for a in attempts] == [1], "the extra copy ran nothing twice"
