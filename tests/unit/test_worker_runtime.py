"""The worker's composition root: the settings given to ``create_app`` are the ones its
executor runs with, the task reaches them through its app, and a forked child builds its own."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from planloop.config.celery import STEP_TASK
from planloop.config.settings import Settings
from planloop.workers.app import create_app
from planloop.workers.runtime import WorkerRuntime
from planloop.workers.tasks import StepTask


def odd_settings(tmp_path: Path) -> Settings:
    """Settings no environment would give by default."""
    return Settings(
        redis_url="redis://127.0.0.1:1/5",  # never connected to: clients connect on first use
        key_prefix="composition",
        database_url=f"sqlite:///{tmp_path / 'planloop.db'}",
        breaker_failures=7,
        breaker_window_s=11.0,
        breaker_cooldown_s=13.0,
        blob_ttl_s=17.0,
        tool_modules=["planloop.workers.toolsets.bench"],
    )


def test_settings_given_to_create_app_reach_the_executor(tmp_path: Path) -> None:
    settings = odd_settings(tmp_path)
    app = create_app(settings)

    task = app.tasks[STEP_TASK]
    executor = task.runtime.executor()

    assert isinstance(task, StepTask)
    assert task.runtime is app.runtime
    assert app.runtime.settings is settings
    assert executor.state.keys.prefix == "composition"
    assert executor.state.blob_ttl_s == 17.0
    assert executor.breaker is not None
    assert (executor.breaker.failures, executor.breaker.window_s) == (7, 11.0)
    assert executor.breaker.cooldown_s == 13.0
    assert "bench.echo" in executor.tools.names()
    assert app.conf.task_default_queue == settings.queue
    assert app.runtime.executor() is executor  # built once per process


def test_two_apps_keep_their_own_settings(tmp_path: Path) -> None:
    first = create_app(odd_settings(tmp_path))
    second = create_app(odd_settings(tmp_path).model_copy(update={"key_prefix": "other"}))

    one = first.tasks[STEP_TASK].runtime.executor()
    two = second.tasks[STEP_TASK].runtime.executor()

    assert (one.state.keys.prefix, two.state.keys.prefix) == ("composition", "other")


def _report_executor(runtime: WorkerRuntime, parents: int, answer: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    built = runtime.executor()
    answer.put((id(built) == parents, built.worker))


def test_a_forked_child_builds_its_own_executor(tmp_path: Path) -> None:
    runtime = WorkerRuntime(odd_settings(tmp_path))
    parents = runtime.executor()
    fork = multiprocessing.get_context("fork")
    answer: multiprocessing.Queue = fork.Queue()  # type: ignore[type-arg]

    child = fork.Process(target=_report_executor, args=(runtime, id(parents), answer))
    child.start()
    same, worker = answer.get(timeout=30)
    child.join(timeout=30)

    assert child.exitcode == 0
    assert not same  # the inherited executor (and its sockets) is not the child's
    assert worker.endswith(f":{child.pid}")
    assert parents.worker != worker
