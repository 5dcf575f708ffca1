"""A deployment upgraded in place keeps its sessions: keys named before the ``{<sid>}`` hash
tags are renamed by the first supervisor that starts (core/key_layout.py), on real Redis.

The old layout is made the way it was left: a real stack runs a session to its end and
another one to a wait for approval, every process is stopped, and their keys are renamed to
the names the releases before the tags used (``pl:s:<sid>...``, ``pl:breaker:<tool>``) with
no ``pl:layout``. Then the new stack starts: the waiting session is approved and completes,
the ended one reads back, and every key of each session lies in one cluster slot.
"""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from planloop.core.keys import KEY_LAYOUT, Keys
from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import parse_plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps, wait_ended

pytestmark = [pytest.mark.integration, pytest.mark.redis_semantics]

WAITS = """
steps:
  - id: broken
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    critical: true
    fallback:
      - {id: alt, tool: bench.echo, params: {value: alternative}}
  - {id: after, tool: bench.echo, params: {value: done}, dependencies: [broken]}
"""
ENDS = """
steps:
  - {id: one, tool: bench.echo, params: {value: 1}}
  - {id: two, tool: bench.echo, params: {value: 2}, dependencies: [one]}
"""


def layout_1_name(keys: Keys, key: str) -> str:
    """The name a release before the tags gave ``key`` (the tags' braces taken out)."""
    for start in (f"{keys.prefix}:s:{{", f"{keys.prefix}:breaker:{{"):
        if key.startswith(start):
            tag, _, rest = key[len(start) :].partition("}")
            return f"{start[:-1]}{tag}{rest}"
    return key


def downgrade(ps: PrivateStack) -> list[str]:
    """Rename the prefix's keys to layout 1, as the old release left them; their new names."""
    keys = ps.keys
    tagged = [
        k
        for k in ps.redis.scan_iter(match=f"{keys.prefix}:*", count=1000)
        if layout_1_name(keys, k) != k
    ]
    for key in tagged:
        ps.redis.rename(key, layout_1_name(keys, key))
    ps.redis.delete(keys.layout)
    return tagged


def session_keys(ps: PrivateStack, sid: str) -> list[str]:
    return [k for k in ps.redis.scan_iter(match=f"{ps.keys.prefix}:*", count=1000) if sid in k]


def test_an_upgraded_deployment_renames_its_keys_and_its_sessions_go_on(
    private_stack: MakeStack,
) -> None:
    ps = private_stack(approval_on_budget=True)
    ended = ps.producer.submit(parse_plan(ENDS))
    assert wait_ended(ps.producer, ended, 30).status == SessionStatus.COMPLETED
    waiting = ps.producer.submit(parse_plan(WAITS), SessionOptions(max_replans=0))
    wait_for(lambda: ps.producer.session(waiting).awaiting == "approval", 30, "the approval wait")
    ps.stop()

    renamed = downgrade(ps)
    keys = ps.keys
    assert keys.session(waiting) in renamed
    assert keys.events(waiting) in renamed
    assert keys.lease(waiting) not in renamed  # released at the stop
    assert not ps.redis.exists(keys.session(waiting), keys.session(ended))
    assert ps.redis.exists(f"{keys.prefix}:s:{waiting}:events")

    ps.start_worker()
    ps.start_supervisor()
    wait_for(lambda: ps.redis.get(keys.layout) == KEY_LAYOUT, 30, "the supervisor's rename")
    now = set(ps.redis.scan_iter(match=f"{keys.prefix}:*", count=1000))
    untagged = [
        k
        for k in now
        for start in (f"{keys.prefix}:s:", f"{keys.prefix}:breaker:")
        if k.startswith(start) and not k.startswith(f"{start}{{")
    ]
    assert not untagged
    assert set(renamed) <= now  # every key is back under its tagged name

    assert ps.producer.session(ended).status == SessionStatus.COMPLETED
    assert ps.producer.session(waiting).awaiting == "approval"
    ps.producer.approve(waiting, "replan_remaining", "use the fallback anyway")
    record = wait_ended(ps.producer, waiting, 30)
    assert record.status == SessionStatus.COMPLETED, record.error
    steps = report_steps(record)
    assert steps["alt"]["status"] == "completed"
    assert steps["after"]["status"] == "completed"
    for sid in (waiting, ended):
        assert len({key_slot(k.encode()) for k in session_keys(ps, sid)}) == 1
