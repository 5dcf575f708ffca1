"""A worker's ``/metrics``: served from the worker's main process while it serves.

The threads pool counts in the main process itself; a prefork pool's children count into
prometheus_client's multiprocess files (``planloop worker`` sets the directory up before
anything imports it, :mod:`core.metrics_dir`), which the main process sums when scraped.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown, worker_ready

from planloop.config.settings import Settings
from planloop.core.metrics import process_exited, serve

log = logging.getLogger(__name__)


def serve_metrics_while_serving(celery_app: Celery, settings: Settings) -> None:
    """Serve ``/metrics`` on ``settings.metrics_port`` once a worker of ``celery_app`` is
    ready (nothing when the port is 0). Celery's signals are global: the handler acts only
    for a worker of its own app."""
    if not settings.metrics_port:
        return

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not celery_app:
            return
        # queue depth is read from shared state: a supervisor exports it (SharedGauges)
        try:
            serve(settings.metrics_port, settings.metrics_address)
        except OSError as exc:  # another worker on this host has the port: run without
            log.warning(
                "metrics: cannot listen on %s:%d (%s); this worker serves no /metrics, give "
                "each worker on a host its own PLANLOOP_METRICS_PORT",
                settings.metrics_address,
                settings.metrics_port,
                exc,
            )
            return
        log.info("metrics on http://%s:%d/metrics", settings.metrics_address, settings.metrics_port)

    def child_exited(pid: int | None = None, **_: Any) -> None:
        if pid is not None:
            process_exited(pid)

    worker_ready.connect(ready, weak=False)
    worker_process_shutdown.connect(child_exited, weak=False)
