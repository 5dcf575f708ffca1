"""Sessions survive a hostile model: a property over seeded sessions.

A private stack from the installed wheel (supervisor, Celery worker, SQLite, real Redis)
talks to the scripted server in its seeded chaos mode (tests/llm_chaos.py): about one answer
in three, for every role, is empty, partial or invalid JSON, prose around JSON, a refusal,
an unknown tool or param, a huge text, a 429 or 500, a stream that stalls or is cut, or an
answer past the client's timeout. Over ``PLANLOOP_TEST_CHAOS_SEEDS`` sessions (default 24)
of the shapes of tests/chaos_sessions.py, every session ends in a terminal state before
its deadline with an answer, no loop crashes, nothing is left running, leased or unacked,
the usage recorded equals what the server reported, and no budget is exceeded by more than
one call.
"""

from __future__ import annotations

import os

import pytest
from pydantic import SecretStr

from planloop.core.heartbeat import live_workers
from tests.chaos_sessions import recheck_stuck, run_sessions, session_spec, settled_usage
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack
from tests.llm_chaos import FAULTS, Chaos
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 1.5
SEEDS = int(os.environ.get("PLANLOOP_TEST_CHAOS_SEEDS", "24"))
FIRST_SEED = int(os.environ.get("PLANLOOP_TEST_CHAOS_FIRST_SEED", "500"))


def test_every_seeded_session_against_a_hostile_model_ends_answered_and_counted(
    private_stack: MakeStack,
) -> None:
    with ScriptedLLMServer(streams=True) as server:
        server.chaos = Chaos(FIRST_SEED, rate=0.35, client_timeout_s=CLIENT_TIMEOUT_S)
        ps = private_stack(
            llm_base_url=server.base_url,
            llm_api_key=SecretStr("test"),
            llm_model="gpt-4o-mini",  # priced: the cost budgets count
            llm_timeout_s=CLIENT_TIMEOUT_S,
            llm_max_retries=1,
            llm_stream_plans=True,
            llm_embedding_model="chaos-embed",
        )
        wait_for(lambda: live_workers(ps.redis, ps.keys, ps.settings.queue), 60, "the worker")
        specs = [session_spec(FIRST_SEED + i) for i in range(SEEDS)]

        verdicts = run_sessions(specs, ps.producer, ps.settings, ps.redis, ps.record)
        recorded, served = settled_usage(ps.record, [v.sid for v in verdicts], server)
        recheck_stuck(verdicts, ps.settings, ps.redis)

        broken = {f"seed {v.seed} ({v.shape}, {v.status})": v.broken for v in verdicts if v.broken}
        assert broken == {}
        assert recorded == served
        assert served["calls"] > len(specs)
        faults = server.chaos.faults
        assert faults["good"] > 0
        assert sum(faults[f] for f in FAULTS) > len(specs) // 2
        assert {v.shape for v in verdicts} == {s.shape for s in specs}
