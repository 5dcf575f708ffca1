"""The one Celery app of the worker pool, configured from :class:`config.Settings`.

``celery -A planloop.workers.app worker`` (and Flower) load the module's ``app``, built on first use
from this process's settings; ``planloop worker`` builds its own with :func:`create_app` from the
settings its command line read. Either way :func:`create_app` is the one place the app, the
worker runtime (executor) and the catalogue publisher are put together.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

from planloop.config.celery import celery_config
from planloop.config.settings import Settings, get_settings
from planloop.core import tracing
from planloop.core.logs import use_format
from planloop.core.masking import install_log_masking
from planloop.core.seams import check_celery_app
from planloop.workers.catalogue import publish_while_serving
from planloop.workers.metrics import serve_metrics_while_serving
from planloop.workers.runtime import PlanloopCelery, WorkerRuntime
from planloop.workers.tasks import register_tasks

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> PlanloopCelery:
    """A Celery app with Planloop's configuration, the step task, and a worker runtime (the
    executor of each process) built from ``settings``; while a worker of this app serves, it
    publishes its tool catalogue."""
    celery_app = PlanloopCelery(WorkerRuntime(settings))
    celery_app.conf.update(celery_config(settings))
    check_celery_app(celery_app, settings)  # the hooks' versions and broker (core/seams.py)
    register_tasks(celery_app)
    publish_while_serving(celery_app, settings)
    if settings.log_format == "json":
        _log_json()
    serve_metrics_while_serving(celery_app, settings)
    tracing.configure(settings, "planloop-worker")
    return celery_app


def run_worker(celery_app: Celery, argv: list[str]) -> int:
    """Run ``celery worker`` of ``celery_app`` with ``argv``; its exit code.

    Celery's ``worker_main`` and ``start`` drop the code (click hands it back as a return
    value they ignore), so a worker that stopped on a broker failure would exit 0 and a
    ``restart: on-failure`` policy would never bring it back.
    """
    from celery.bin.celery import celery as command

    command.params[0].default = celery_app  # the --app option, as Celery.start sets it
    try:
        code = command.main(args=argv, standalone_mode=False)
    finally:
        command.params[0].default = None
    return code if isinstance(code, int) else 0


def _mask_logs(logger: logging.Logger, **_: object) -> None:
    install_log_masking(logger)  # the worker's log lines pass the one masker (core/masking.py)


after_setup_logger.connect(_mask_logs, weak=False)
after_setup_task_logger.connect(_mask_logs, weak=False)


def _json_logs(logger: logging.Logger, **_: object) -> None:
    use_format(logger, "json")  # Celery's handlers write JSON lines (core/logs.py)


def _log_json() -> None:
    # connected once per process however many apps it builds (Celery's signals are global)
    after_setup_logger.connect(_json_logs, weak=False, dispatch_uid="planloop-json-logs")
    after_setup_task_logger.connect(_json_logs, weak=False, dispatch_uid="planloop-json-task-logs")


@cache
def default_app() -> PlanloopCelery:
    """The app of ``celery -A planloop.workers.app`` (Flower, bare celery): that entry point's
    settings come from the environment."""
    return create_app(get_settings())


def __getattr__(name: str) -> Any:
    # `planloop.workers.app.app` is built on first use, so importing create_app builds no app
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
