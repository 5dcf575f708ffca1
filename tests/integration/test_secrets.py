"""Known secrets go in through a plan, a tool output and an error; no output path shows one.

The plan's tools live in a module only the worker imports (``secret_tools``): the supervisor
validates nothing about them (it dispatches what the producer accepted), and the producer
validates plans against its own registry, so the test submits as a client that has the
tools (a :class:`Producer` with them registered, in this process), while the ``planloop``
commands below and the supervisor never import them and learn the ``sensitive`` fields
from the tool catalogue the worker publishes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from planloop.config.settings import Settings
from planloop.core.catalogue import SensitiveNames, publish_catalogue, read_catalogue
from planloop.core.heartbeat import live_workers
from planloop.core.keys import Keys
from planloop.core.models import StepTaskArgs
from planloop.core.tools import ToolRegistry, load_tools
from planloop.planner.plan import Plan
from planloop.planner.situation import EventView, Situation, StepView, render_situation
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from planloop.supervisor.io.step_queue import Dispatcher
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack
from tests.shipped import shipped
from tests.tool_modules.secret_tool_defs import ECHO, PARSE, register

pytestmark = pytest.mark.integration

SECRET_TOOLS = "secret_tools"  # tests/tool_modules, on the shipped processes' path
STEPS = ["echo", "parse"]


def new_secret() -> str:
    return f"zq{uuid.uuid4().hex}"


def secret_plan(s: dict[str, str]) -> Plan:
    return Plan.model_validate(
        {
            "goal": f"audit the cache at redis://ops:{s['goal']}@cache:6379/0",
            "steps": [
                {
                    "id": "echo",
                    "tool": ECHO,
                    "params": {
                        "items": [{"token": s["token"]}],
                        "apiKey": s["api_key"],
                        "url": f"https://u:{s['url']}@host/x",
                        "pin": s["pin"],
                    },
                },
                {
                    "id": "parse",
                    "tool": PARSE,
                    "params": {"payload": json.dumps({"port": s["parse"]})},
                    "max_retries": 0,
                },
            ],
        }
    )


def start_worker(stack: PrivateStack, log_dir: Path) -> Stack:
    """A worker that (alone) imports the secrets test's tools, logging at INFO."""
    log_dir.mkdir()
    env = {**stack.stack.env, "PLANLOOP_TOOL_MODULES": json.dumps([SECRET_TOOLS])}
    workers = shipped().stack(env, log_dir)
    workers._spawn("worker", ["worker", "--concurrency", "2", "--loglevel", "INFO"])
    return workers


def queued_messages(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The Celery messages waiting in ``queue`` (every priority list of it)."""
    messages = []
    for key in client.scan_iter(match=f"{queue}*"):
        if client.type(key) == "list":
            messages += [json.loads(raw) for raw in client.lrange(key, 0, -1)]
    return messages


def planloop(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env(env),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout + result.stderr


def prompt_for(stack: PrivateStack, client: redis.Redis, sid: str) -> str:
    """The situation report a decider would read for this session, rendered the supervisor's
    way: its own registry (without the test's tools) merged with the catalogue."""
    raw = stack.hot.plan_json(sid, 1)
    assert raw is not None
    plan = Plan.model_validate_json(raw)
    states = stack.hot.steps(sid, plan.step_ids)
    names = SensitiveNames(load_tools([]), client, stack.keys)
    situation = Situation(
        goal=plan.goal,
        constraints=(),
        steps=tuple(
            StepView(
                id=step.id,
                tool=step.tool,
                title=step.title,
                status=states[step.id].status.value,
                attempts=states[step.id].attempt,
                error=states[step.id].error,
                output=stack.hot.output(states[step.id].output_ref),
            )
            for step in plan.steps
        ),
        events=tuple(
            EventView(e.type.value, e.severity.value, e.step_id, e.description)
            for _, e in stack.hot.events(sid)
        ),
        replans_used=0,
        max_replans=3,
        trigger="TASK_FAILED on parse",
        sensitive=names.of_tools(step.tool for step in plan.steps),
    )
    return render_situation(situation)


def sql_texts(stack: PrivateStack, sid: str) -> dict[str, str]:
    """What the SQL record shows (reports, errors, events, decisions), not what it stores
    for running (plan versions and outputs hold the values the tools need)."""
    row = stack.record.session(sid)
    assert row is not None
    return {
        "sql report": f"{row.report} {row.error}",
        "sql attempts": " ".join(a.error for a in stack.record.attempts(sid)),
        "sql events": " ".join(f"{e.description} {e.payload}" for e in stack.record.events(sid)),
        "sql decisions": " ".join(
            f"{d.reasoning} {d.payload}" for d in stack.record.decisions(sid)
        ),
    }


def test_no_output_path_shows_a_secret(
    private_stack: MakeStack, redis_client: redis.Redis, tmp_path: Path
) -> None:
    secrets = {name: new_secret() for name in ("token", "api_key", "url", "pin", "parse", "goal")}
    stack = private_stack(workers=0, supervisors=1)
    keys: Keys = stack.keys
    outputs: dict[str, str] = {}
    worker_stacks: list[Stack] = []
    try:
        # 1. A worker publishes its catalogue, then leaves: the steps wait in the queue.
        worker_stacks.append(start_worker(stack, tmp_path / "worker-1"))
        wait_for(lambda: PARSE in read_catalogue(redis_client, keys), 30, "the tool catalogue")
        assert read_catalogue(redis_client, keys)[ECHO].sensitive == ["pin"]
        (beat,) = wait_for(lambda: live_workers(redis_client, keys, stack.settings.queue), 30)
        pool = beat.queues[0]  # the worker's pool queue (core/routing.py)
        worker_stacks[0].stop()

        tools = ToolRegistry(load_tools([]).specs())
        register(tools)
        assert ECHO not in load_tools([])  # this process's registry (and the supervisor's)
        # Sent to the gone worker's pool queue explicitly: routed by live workers, the
        # steps would wait unserved, unqueued, until worker 2 starts.
        plan = secret_plan(secrets)
        plan = plan.model_copy(
            update={"steps": [st.model_copy(update={"queue": pool}) for st in plan.steps]}
        )
        sid = Producer(stack.settings, stack.hot, tools).submit(plan)

        # 2. The Celery messages as queued: their argsrepr/kwargsrepr is what Flower shows.
        messages = wait_for(
            lambda: (
                m if len(m := queued_messages(redis_client, stack.settings.queue)) >= 2 else None
            ),
            30,
            "both steps queued",
        )
        bodies = " ".join(base64.b64decode(m["body"]).decode() for m in messages)
        assert secrets["pin"] in bodies  # the worker gets the real values
        shown = " ".join(
            f"{m['headers']['argsrepr']} {m['headers']['kwargsrepr']}" for m in messages
        )
        assert ECHO in shown
        assert "***" in shown
        outputs["celery argsrepr/kwargsrepr"] = shown

        # 3. A worker runs them; the session ends.
        worker_stacks.append(start_worker(stack, tmp_path / "worker-2"))
        record = stack.finish(sid, STEPS, 60)
        assert record.report is not None
        report_steps = {s["id"]: s for s in record.report["steps"]}
        assert report_steps["echo"]["status"] == "completed"
        assert report_steps["echo"]["output"]["count"] == 1  # the output is there, masked
        assert "port: Input should be a valid integer" in report_steps["parse"]["error"]

        # 4. Every output path.
        outputs["events stream"] = json.dumps(redis_client.xrange(keys.events(sid)))
        session_hash = redis_client.hgetall(keys.session(sid))
        outputs["redis report"] = f"{session_hash.get('report')} {session_hash.get('error')}"
        outputs["step errors"] = " ".join(st.error for st in stack.hot.steps(sid, STEPS).values())
        outputs.update(sql_texts(stack, sid))
        env = {**os.environ, **stack.settings.to_env()}
        outputs["planloop show"] = planloop(env, "show", sid)
        outputs["planloop show --json"] = json_text = planloop(env, "show", sid, "--json")
        outputs["planloop watch"] = planloop(env, "watch", sid)
        outputs["planloop status"] = planloop(env, "status", sid)
        outputs["prompt"] = prompt = prompt_for(stack, redis_client, sid)
        assert ECHO in prompt
        assert '"pin":"***"' in prompt
        assert '"pin": "***"' in json_text
        assert '"payload": "***"' not in json_text  # a tool's sensitive names hide its values only
    finally:
        for workers in worker_stacks:
            workers.stop()
    logs = [*stack.stack.log_dir.rglob("*.log"), *tmp_path.rglob("*.log")]
    assert len(logs) == 3  # the supervisor and both workers
    for path in logs:
        outputs[f"log {path}"] = path.read_text(errors="replace")

    leaks = [
        f"{where}: {name}"
        for where, text in outputs.items()
        for name, value in secrets.items()
        if value in text
    ]
    assert not leaks, f"secrets shown: {leaks}"


def test_sensitive_names_merge_the_registry_and_the_published_catalogue(
    redis_client: redis.Redis,
) -> None:
    keys = Keys(f"cat{uuid.uuid4().hex[:8]}")
    served = _served()
    try:
        names = SensitiveNames(load_tools([]), redis_client, keys)
        assert names.of_tool(ECHO) is None  # nobody knows it yet: callers hide it whole
        assert names.of_tool("bench.echo") == frozenset()  # known here, nothing sensitive
        assert publish_catalogue(redis_client, keys, served, "w1") == 2
        names._loaded_at = float("-inf")  # the once-a-second reload limit has passed
        assert names.of_tool(ECHO) == frozenset({"pin"})
        assert names.of_tools([ECHO, PARSE, "bench.echo", "nobody.knows"]) == {"pin", "payload"}
        entry = read_catalogue(redis_client, keys)[ECHO]
        assert entry.worker == "w1"
        assert entry.published_at > 0
        assert "apiKey" in json.dumps(entry.params_schema)
    finally:
        redis_client.delete(keys.tools)


def test_flower_is_shown_no_param_of_a_tool_nobody_knows(
    test_settings: Settings, redis_client: redis.Redis
) -> None:
    settings = test_settings.model_copy(update={"key_prefix": f"cat{uuid.uuid4().hex[:8]}"})
    dispatcher = Dispatcher(settings, load_tools([]))
    args = StepTaskArgs(
        session_id="s",
        step_id="a",
        attempt=1,
        epoch=1,
        tool=ECHO,  # not in this registry, and no worker has published it
        params={"pin": "S1", "items": [{"note": "S2"}], "count": 3},
        timeout_s=5,
        idempotency_key="s:a",
    )
    try:
        shown = json.loads(dispatcher._shown(args))[0]
        assert shown["params"] == {"pin": "***", "items": "***", "count": "***"}
        publish_catalogue(redis_client, Keys(settings.key_prefix), _served(), "w1")
        dispatcher.sensitive._loaded_at = float("-inf")  # the reload limit has passed
        shown = json.loads(dispatcher._shown(args))[0]
        assert shown["params"] == {"pin": "***", "items": [{"note": "S2"}], "count": 3}
    finally:
        dispatcher.close()
        redis_client.delete(Keys(settings.key_prefix).tools)


def _served() -> ToolRegistry:
    served = ToolRegistry()
    register(served)
    return served
