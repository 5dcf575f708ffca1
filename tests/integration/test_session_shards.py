"""Ownership by session shard on the real stack: supervisors split the shards, a dead one's
shards move with nothing run twice, a paused former owner is fenced, and a session held
under a lease of a release before shards is adopted once that lease runs out."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import pytest

from planloop.core.models import StepStatus
from planloop.core.shards import shard_holder, shard_holders
from planloop.planner.plan import parse_plan
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools in this process)
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps
from tests.integration.test_resume import assert_effects_once, step_ids, write_chain

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

SHARDS = 8


def holders(ps: PrivateStack) -> Counter[str | None]:
    """Shards held per supervisor name (None: free)."""
    return Counter(shard_holders(ps.redis, ps.keys, range(SHARDS)))


def name_of(ps: PrivateStack, proc: subprocess.Popen[bytes]) -> str | None:
    return next((n for n in holders(ps) if n and f"-{proc.pid}-" in n), None)


def test_supervisors_split_the_shards_and_a_dead_ones_move_with_nothing_run_twice(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=1, session_shards=SHARDS)
    first = ps.supervisors[0]
    wait_for(lambda: holders(ps).get(name_of(ps, first)) == SHARDS, 30, "one holder of all")
    second = ps.start_supervisor()
    # The first gives back half at a safe point; the newcomer takes them.
    wait_for(lambda: sorted(holders(ps).values()) == [SHARDS // 2, SHARDS // 2], 30, "a split")
    plans = [write_chain(8) for _ in range(6)]
    sids = [ps.producer.submit(plan) for plan in plans]
    for sid in sids:  # each adopted by its shard's holder
        wait_for(
            lambda sid=sid: (
                ps.hot.session(sid).owner == shard_holder(ps.redis, ps.keys, sid, SHARDS)
            ),
            30,
            f"{sid} adopted by its shard's holder",
        )
    wait_for(
        lambda: all(
            len(ps.completed(s, step_ids(p))) >= 2 for s, p in zip(sids, plans, strict=True)
        ),
        60,
        "progress",
    )
    victim = next(p for p in (first, second) if name_of(ps, p) is not None)
    survivor = second if victim is first else first
    done_before = {
        sid: {
            i: st.started_at
            for i, st in ps.step_states(sid, step_ids(plan)).items()
            if st.status == StepStatus.COMPLETED
        }
        for sid, plan in zip(sids, plans, strict=True)
    }
    killed_at = time.time()
    ps.signal(victim, signal.SIGKILL)
    wait_for(lambda: holders(ps).get(name_of(ps, survivor)) == SHARDS, 10, "the takeover")

    for sid, plan in zip(sids, plans, strict=True):
        record = ps.finish(sid, step_ids(plan))
        assert record.status.value == "completed", record.error
        steps = report_steps(record)
        for step_id, started_at in done_before[sid].items():
            assert steps[step_id]["attempts"] == 1, f"{sid}/{step_id} ran again"
            # The step hash has the claim's time until the owner applies the outcome, which
            # carries the run's start (a little later under load); a re-run starts after
            # the kill.
            assert started_at <= steps[step_id]["started_at"] < killed_at, f"{sid}/{step_id}"
        assert_effects_once(ps, sid, step_ids(plan))


def test_a_paused_former_owner_is_fenced_when_its_shards_move(private_stack: MakeStack) -> None:
    ps = private_stack(workers=1, supervisors=1, session_shards=SHARDS)
    plan = write_chain(12)
    ids = step_ids(plan)
    sid = ps.producer.submit(plan)
    wait_for(lambda: len(ps.completed(sid, ids)) >= 3, 60, "three steps to complete")
    paused = ps.owner_process(sid)
    assert paused is not None
    before = ps.hot.session(sid)
    ps.signal(paused, signal.SIGSTOP)
    successor = ps.start_supervisor()
    wait_for(lambda: ps.hot.session(sid).epoch > before.epoch, 20, "the takeover")
    ps.signal(paused, signal.SIGCONT)  # wakes up believing it holds every shard

    record = ps.finish(sid, ids)

    assert record.status.value == "completed", record.error
    assert ps.owner_process(sid) in (None, successor)
    assert_effects_once(ps, sid, ids)
    wait_for(lambda: "lease lost" in ps.supervisor_log(paused), 10, "the loss noticed")


def test_a_session_held_under_an_old_per_session_lease_is_adopted_once_it_expires(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(workers=1, supervisors=0, session_shards=SHARDS)
    plan = parse_plan("steps:\n  - {id: a, tool: bench.echo, params: {value: 1}}\n")
    sid = ps.producer.submit(plan)
    # As a supervisor of the release before shards leaves it: its own lease, still running.
    ps.redis.set(ps.keys.lease(sid), "sup-old-1-abcdef:tok", px=2_000)
    ps.start_supervisor()
    while ps.redis.exists(ps.keys.lease(sid)):
        assert ps.hot.session(sid).epoch == 0, "adopted while an old owner held it"
    record = ps.finish(sid, ["a"], 30)
    assert record.status.value == "completed", record.error
