"""Seeded sessions against the hostile model (tests/llm_chaos.py), and what each must hold.

Shared by the property test (tests/integration/test_hostile_models.py) and the bench
(bench/agent_chaos.py): :func:`session_spec` turns a seed into one of :data:`SHAPES` (a goal
planned by the model, routed, an explicit plan with parallel agent steps, critique rounds,
an answer schema, a token or cost budget, a short deadline); :func:`run_sessions` submits
them a few at a time to a running stack and returns one :class:`Verdict` per session, and
:func:`usage_totals` the recorded and served usage of the whole run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import redis

from planloop.config.settings import Settings
from planloop.core.keys import EVENTS_GROUP, Keys
from planloop.core.llm_budget import Budget, spend_of
from planloop.core.models import SessionOptions, StepStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from tests.llm_server import ScriptedLLMServer

SHAPES = ("goal", "routed", "agents", "rounds", "schema", "tokens", "cost", "deadline")
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"result": {"type": "string"}},
    "required": ["result"],
}
DEADLINE_S = 45.0  # every session's deadline (the "deadline" shape's is shorter)
AGENTS_PLAN = """
goal: chaos {seed}, two agent steps side by side, then an echo
steps:
  - {{id: seed, tool: bench.echo, params: {{value: {seed}}}}}
  - id: left
    tool: agent.react
    instruction: Echo the seed, then report it
    params: {{tools: [bench.echo], max_iterations: 3, context: {{n: "{{{{seed.output.value}}}}"}}}}
    dependencies: [seed]
  - id: right
    tool: agent.react
    instruction: Echo the seed twice, then report it
    params: {{tools: [bench.echo], max_iterations: 3, context: {{n: "{{{{seed.output.value}}}}"}}}}
    dependencies: [seed]
  - {{id: last, tool: bench.echo, params: {{value: done}}, dependencies: [left, right]}}
"""
SLOW_PLAN = """
goal: chaos {seed}, slower than its deadline
steps:
  - {{id: nap, tool: bench.sleep, params: {{seconds: 30}}, timeout_s: 60}}
  - {{id: after, tool: bench.echo, params: {{value: late}}, dependencies: [nap]}}
"""


@dataclass(frozen=True)
class SessionSpec:
    """One seeded session: its shape and how to submit it."""

    seed: int
    shape: str
    submit: Callable[[Producer], str]
    deadline_s: float


def session_spec(seed: int) -> SessionSpec:
    """The session of ``seed``: shape and options drawn from it."""
    rng = random.Random(f"chaos-session-{seed}")
    shape = SHAPES[seed % len(SHAPES)]
    goal = f"Chaos {seed}: echo {rng.randrange(100)} values and report them"
    base: dict[str, Any] = {"mode": "plan", "deadline_s": DEADLINE_S}

    def goal_session(**options: Any) -> Callable[[Producer], str]:
        def submit(producer: Producer) -> str:
            return producer.submit_goal(
                goal, tools=["bench"], options=SessionOptions(**{**base, **options})
            )

        return submit

    def plan_session(plan: str, **options: Any) -> Callable[[Producer], str]:
        def submit(producer: Producer) -> str:
            opts = SessionOptions(**{**base, **options})
            return producer.submit(parse_plan(plan.format(seed=seed)), opts)

        return submit

    deadline = DEADLINE_S
    if shape == "goal":
        submit = goal_session()
    elif shape == "routed":
        submit = goal_session(mode="auto")
    elif shape == "agents":
        submit = plan_session(AGENTS_PLAN, max_replans=rng.randint(0, 2))
    elif shape == "rounds":
        submit = goal_session(max_rounds=rng.randint(2, 3))
    elif shape == "schema":
        submit = goal_session(answer_schema=ANSWER_SCHEMA, max_rounds=2)
    elif shape == "tokens":
        submit = goal_session(max_tokens=rng.randint(400, 4000), max_rounds=2)
    elif shape == "cost":
        # gpt-4o-mini: $0.15 per million prompt tokens; 0.0003$ is about 2k tokens
        submit = plan_session(AGENTS_PLAN, max_cost_usd=rng.choice([0.0002, 0.0004, 0.0008]))
    else:
        deadline = 6.0
        submit = plan_session(SLOW_PLAN, deadline_s=deadline)
    return SessionSpec(seed, shape, submit, deadline)


@dataclass
class Verdict:
    """What one session did, and which of the properties it broke."""

    seed: int
    shape: str
    sid: str
    status: str = ""
    ended_in_time: bool = False
    answered: bool = False
    crashes: int = 0
    stuck: list[str] = field(default_factory=list)
    overrun: str = ""
    off_schema: bool = False  # an answer schema was asked for and the answer's data misfits
    error: str = ""

    @property
    def broken(self) -> list[str]:
        """The properties this session broke, in words."""
        problems = []
        if not self.ended_in_time:
            problems.append(f"did not end before its deadline ({self.status})")
        if self.ended_in_time and not self.answered:
            problems.append("ended without an answer")
        if self.crashes:
            problems.append(f"{self.crashes} loop crash(es)")
        problems += [f"stuck: {s}" for s in self.stuck]
        if self.overrun:
            problems.append(f"budget overrun: {self.overrun}")
        if self.off_schema:
            problems.append("the answer's data does not fit the answer schema")
        return problems


def run_sessions(
    specs: Sequence[SessionSpec],
    producer: Producer,
    settings: Settings,
    client: redis.Redis,
    record: SqlRecord,
    *,
    at_once: int = 4,
    slack_s: float = 30.0,
) -> list[Verdict]:
    """Submit ``specs`` ``at_once`` at a time; each must end by its deadline plus
    ``slack_s`` (the supervisor's deadline check and the answer's writing)."""
    verdicts: list[Verdict] = []
    for start in range(0, len(specs), at_once):
        batch = specs[start : start + at_once]
        running = [(spec, spec.submit(producer), time.monotonic()) for spec in batch]
        for spec, sid, submitted in running:
            verdicts.append(
                _await(spec, sid, submitted, producer, settings, client, record, slack_s)
            )
    return verdicts


def _await(
    spec: SessionSpec,
    sid: str,
    submitted: float,
    producer: Producer,
    settings: Settings,
    client: redis.Redis,
    record: SqlRecord,
    slack_s: float,
) -> Verdict:
    verdict = Verdict(spec.seed, spec.shape, sid)
    due = submitted + spec.deadline_s + slack_s
    while True:
        session = producer.session(sid)
        row = record.session(sid)
        if session.status.ended and row is not None and row.status == session.status.value:
            break
        if time.monotonic() > due:
            break
        time.sleep(0.2)
    verdict.status, verdict.error = session.status.value, session.error
    verdict.ended_in_time = session.status.ended
    verdict.answered = bool(session.answer and str(session.answer.get("text", "")).strip())
    data = (session.answer or {}).get("data")
    if session.options.answer_schema and data is not None:
        verdict.off_schema = not jsonschema.Draft202012Validator(
            session.options.answer_schema
        ).is_valid(data)
    keys = Keys(settings.key_prefix)
    verdict.crashes = int(client.hget(keys.session(sid), "crashes") or 0)
    if verdict.ended_in_time:
        verdict.stuck = stuck_parts(client, keys, sid)
        verdict.overrun = overrun(record, sid, session.options, settings)
    return verdict


def stuck_parts(client: redis.Redis, keys: Keys, sid: str) -> list[str]:
    """What an ended session still holds: running steps, its lease, unacked events."""
    stuck = []
    for key in client.scan_iter(match=keys.step(sid, "*"), count=500):
        if client.hget(key, "status") in (
            StepStatus.RUNNING.value,
            StepStatus.RUNNING.value.encode(),
        ):
            stuck.append(f"running step {key!r}")
    if client.exists(keys.lease(sid)):
        stuck.append("lease held")
    try:
        pending = client.xpending(keys.events(sid), EVENTS_GROUP)
    except redis.ResponseError:
        pending = {"pending": 0}
    if pending and int(pending.get("pending", 0)):
        stuck.append(f"{pending['pending']} pending event(s)")
    return stuck


def overrun(record: SqlRecord, sid: str, options: SessionOptions, settings: Settings) -> str:
    """How the session spent more than one call over a budget ("" if it did not): its
    spend without its last recorded call must be under each budget."""
    budget = Budget.of(options, settings)
    calls = list(record.llm_calls(sid))
    if len(calls) < 2 or (budget.max_tokens is None and budget.max_cost_usd is None):
        return ""
    before_last: dict[str, list[int]] = {}
    for call in calls[:-1]:
        totals = before_last.setdefault(call.model, [0, 0])
        totals[0] += call.prompt_tokens
        totals[1] += call.completion_tokens
    spent = budget.spent(spend_of(before_last, settings.llm_prices))
    if not spent:
        return ""
    story = ", ".join(
        f"{c.role}{'@' + c.step_id if c.step_id else ''}={c.prompt_tokens}+{c.completion_tokens}"
        for c in calls
    )
    return f"{spent} before its last call; calls: {story}"


def usage_totals(
    record: SqlRecord, sids: Sequence[str], server: ScriptedLLMServer
) -> tuple[dict[str, int], dict[str, int]]:
    """(recorded, served): the run's calls and tokens as recorded against its sessions and
    as the server reported them."""
    recorded = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for sid in sids:
        for call in record.llm_calls(sid):
            recorded["calls"] += 1
            recorded["prompt_tokens"] += call.prompt_tokens
            recorded["completion_tokens"] += call.completion_tokens
    return recorded, server.served_usage()


def settled_usage(
    record: SqlRecord, sids: Sequence[str], server: ScriptedLLMServer, timeout_s: float = 30.0
) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`usage_totals` once they agree, or as they stand after ``timeout_s``: the
    reflector and lesson embeddings run after a session's end."""
    due = time.monotonic() + timeout_s
    while True:
        recorded, served = usage_totals(record, sids, server)
        if recorded == served or time.monotonic() > due:
            return recorded, served
        time.sleep(0.5)


def recheck_stuck(
    verdicts: Sequence[Verdict], settings: Settings, client: redis.Redis, timeout_s: float = 30.0
) -> None:
    """Look again at what ended sessions hold, for up to ``timeout_s``: a loop keeps its
    lease through the work after the end (the reflector's calls, with their retries), so
    a lease released a few seconds later is not stuck; one still held then is."""
    keys = Keys(settings.key_prefix)
    due = time.monotonic() + timeout_s
    while True:
        for verdict in verdicts:
            if verdict.stuck:
                verdict.stuck = stuck_parts(client, keys, verdict.sid)
        if not any(v.stuck for v in verdicts) or time.monotonic() > due:
            return
        time.sleep(0.5)
