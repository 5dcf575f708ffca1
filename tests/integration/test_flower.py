"""Flower tells the truth: a real Flower process, a real worker, read through Flower's HTTP API.

A failed attempt is FAILURE (RETRY when the supervisor retries it), a completed one SUCCESS;
every task is named after its tool (Celery's shadow name) and shows its session and step with
the params masked; the queue-length API (the Broker page's source) answers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import pytest

from planloop.core.heartbeat import live_workers
from planloop.core.models import SessionStatus
from planloop.core.receipts import KOMBU_UNACKED
from planloop.planner.plan import Plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack, report_steps
from tests.shipped import shipped

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Flower:
    """A ``celery flower`` process on the stack's broker, its API open (no auth, test only)."""

    def __init__(self, stack: PrivateStack) -> None:
        self.port = free_port()
        env = {**stack.stack.env, "FLOWER_UNAUTHENTICATED_API": "true"}
        env.pop("FLOWER_BASIC_AUTH", None)
        self.log = stack.stack.log_dir / "flower.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(shipped().python),
                    "-m",
                    "celery",
                    "-A",
                    "planloop.workers.app",
                    "flower",
                    f"--port={self.port}",
                    "--address=127.0.0.1",
                    "--persistent=False",
                ],
                env=env,
                cwd=shipped().home,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    def answers(self, path: str) -> Any:
        """The JSON at ``path``, or None while Flower is not up yet."""
        if self.proc.poll() is not None:
            pytest.fail(f"flower exited: {self.log.read_text(errors='replace')[-2000:]}")
        with suppress(OSError, ValueError):
            return self.get(path)
        return None

    def stop(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 15)
        self.proc.wait(10)


@pytest.fixture(params=["threads", "prefork"])
def flower_stack(
    private_stack: MakeStack, request: pytest.FixtureRequest
) -> Iterator[tuple[PrivateStack, Flower]]:
    # prefork: the task's exceptions cross a process boundary (pickled) to reach the events.
    stack = private_stack(workers=0)
    stack.start_worker(concurrency=2, pool=request.param)
    flower = Flower(stack)
    try:
        # Flower sees only events published while it listens: wait until it knows the worker.
        wait_for(lambda: flower.answers("/api/workers?refresh=1"), 30, "flower to see a worker")
        yield stack, flower
    finally:
        flower.stop()


def test_flower_shows_failures_retries_tool_names_and_queue_lengths(
    flower_stack: tuple[PrivateStack, Flower],
) -> None:
    stack, flower = flower_stack
    secret = f"zq{uuid.uuid4().hex}"
    plan = Plan.model_validate(
        {
            "goal": "one step fails after one retry",
            "steps": [
                {"id": "ok", "tool": "bench.echo", "params": {"value": {"api_key": secret}}},
                {
                    "id": "broken",
                    "tool": "bench.sleep",
                    "params": {"seconds": 0.01, "simulate": {"fail_attempts": [1, 2]}},
                    "max_retries": 1,
                },
            ],
        }
    )
    sid = stack.producer.submit(plan)
    record = stack.finish(sid, ["ok", "broken"])
    assert record.status == SessionStatus.COMPLETED  # the broken step is not critical
    assert report_steps(record)["broken"]["status"] == "failed"

    def our_tasks() -> dict[str, dict[str, Any]] | None:
        tasks = flower.answers("/api/tasks") or {}
        ours = {t["uuid"]: t for t in tasks.values() if t["uuid"].startswith(f"{sid}:")}
        done = {"SUCCESS", "FAILURE", "RETRY"}
        return ours if len(ours) == 3 and all(t["state"] in done for t in ours.values()) else None

    tasks = wait_for(our_tasks, 30, "flower to see the session's three tasks end")
    states = {uuid_: (t["name"], t["state"]) for uuid_, t in tasks.items()}
    # FAILURE and RETRY acked their messages: nothing is left to be redelivered and run again.
    unacked = [v for v in stack.redis.hvals(KOMBU_UNACKED) if sid in v]
    assert unacked == []
    assert states == {
        f"{sid}:ok:1": ("planloop.step:bench.echo", "SUCCESS"),
        f"{sid}:broken:1": ("planloop.step:bench.sleep", "RETRY"),
        f"{sid}:broken:2": ("planloop.step:bench.sleep", "FAILURE"),
    }
    failed = tasks[f"{sid}:broken:2"]
    assert "injected failure" in failed["exception"]
    assert "StepAttemptFailed" in failed["exception"]
    shown = tasks[f"{sid}:ok:1"]["args"]
    assert sid in shown
    assert '"step": "ok"' in shown
    assert "bench.echo" in shown
    assert secret not in json.dumps(tasks)  # args/kwargs as Flower shows them are masked

    # Each task shows the queue it was routed to: the worker's pool queue (core/routing.py).
    (worker,) = live_workers(stack.redis, stack.keys, stack.settings.queue)
    (pool,) = worker.queues
    assert {t["routing_key"] for t in tasks.values()} == {pool}, tasks

    # The queue-length API (what the Broker page draws) knows our redis broker and queue.
    # Flower lists the queues its workers' inspect replies name (other test runs' workers
    # share the broker): ask again until our worker's reply is in.
    def our_queue() -> dict[str, int] | None:
        flower.answers("/api/workers?refresh=1")
        lengths = flower.answers("/api/queues/length") or {"active_queues": []}
        queues = {q["name"]: q["messages"] for q in lengths["active_queues"]}
        return queues if pool in queues else None

    queues = wait_for(our_queue, 30, "flower's queue lengths to list our queue")
    assert queues[pool] == 0
    url = f"http://127.0.0.1:{flower.port}/broker"
    with urllib.request.urlopen(url, timeout=10) as page:  # 404 before: "not supported"
        html = page.read().decode()
    assert pool in html


def test_a_step_a_person_approved_names_them_in_its_task_args(private_stack: MakeStack) -> None:
    stack = private_stack(workers=0)
    stack.start_worker(concurrency=2)
    flower = Flower(stack)
    try:
        wait_for(lambda: flower.answers("/api/workers?refresh=1"), 30, "flower to see a worker")
        plan = Plan.model_validate(
            {
                "goal": "a write a person approves",
                "steps": [
                    {"id": "a", "tool": "bench.echo", "params": {"value": 1}},
                    {
                        "id": "b",
                        "tool": "bench.echo",
                        "params": {"value": 2},
                        "dependencies": ["a"],
                        "requires_approval": True,
                    },
                ],
            }
        )
        sid = stack.producer.submit(plan)
        wait_for(
            lambda: stack.producer.state.steps(sid, ["b"])["b"].note == "awaiting approval",
            30,
            "the approval request",
        )
        stack.producer.approve(sid, step="b", actor="otto")
        stack.finish(sid, ["a", "b"])

        def args_of(task: str) -> str | None:
            found = (flower.answers("/api/tasks") or {}).get(f"{sid}:{task}:1")
            return found["args"] if found and found["state"] == "SUCCESS" else None

        assert '"requested_by": "otto"' in wait_for(lambda: args_of("b"), 30, "task b")
        assert "requested_by" not in wait_for(lambda: args_of("a"), 30, "task a")
    finally:
        flower.stop()
