"""A worker publishes the tools it serves to ``pl:tools`` while it runs (core/catalogue.py).

Published when the worker is ready and again every ``catalogue_refresh_s`` from a daemon
thread of the worker's main process, so an entry's ``published_at`` says the tool still has
a live worker. A Redis fault skips a round (logged once per outage); the next one catches up.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from config.settings import Settings
from core.catalogue import publish_catalogue
from core.hot_state import connect
from core.keys import Keys
from core.tools import load_tools

log = logging.getLogger(__name__)


class CataloguePublisher:
    """Publishes this worker's tool catalogue now and every refresh period until stopped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._published = True  # the last round's fate: log only when it changes

    def publish(self) -> bool:
        """One round; False when Redis did not take it."""
        client = connect(self.settings.redis_url)
        try:
            tools = load_tools(self.settings.tool_modules)
            count = publish_catalogue(client, Keys(self.settings.key_prefix), tools, self.worker)
        except redis.RedisError as exc:
            if self._published:
                log.warning("worker %s: tool catalogue not published (%s)", self.worker, exc)
            self._published = False
            return False
        finally:
            client.close()
        if not self._published or self._thread is None:
            log.info("worker %s published %d tools to the catalogue", self.worker, count)
        self._published = True
        return True

    def start(self) -> None:
        self.publish()
        self._thread = threading.Thread(target=self._loop, name="planloop-catalogue", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.catalogue_refresh_s):
            self.publish()


def publish_while_serving(celery_app: Celery, settings: Settings) -> None:
    """Publish the catalogue while a worker of ``celery_app`` serves, until it shuts down.

    Celery's signals are global: a handler acts only for a worker of its own app, so apps
    built for other jobs (a ping, a test) publish nothing.
    """
    publisher = CataloguePublisher(settings)

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is celery_app:
            publisher.start()

    def shutdown(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is celery_app:
            publisher.stop()

    worker_ready.connect(ready, weak=False)
    worker_shutdown.connect(shutdown, weak=False)
