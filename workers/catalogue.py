"""A worker publishes the tools it serves while it runs: the catalogue ``pl:tools``
(core/catalogue.py) and its heartbeat in ``pl:workers`` (core/heartbeat.py).

Both are written when the worker is ready, from a daemon thread of the worker's main process:
the heartbeat every ``worker_heartbeat_s`` (so ``submit`` can tell which tools a live worker
serves), the catalogue every ``catalogue_refresh_s``. A worker that shuts down removes its
heartbeat. A Redis fault skips a round (logged once per outage); the next one catches up.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from planloop.config.settings import Settings
from planloop.core.catalogue import publish_catalogue
from planloop.core.heartbeat import beat, forget
from planloop.core.hot_state import connect
from planloop.core.keys import Keys
from planloop.core.redis_client import redis_address
from planloop.core.routing import worker_queues as derive_queues
from planloop.core.tools import ToolRegistry, load_tools

log = logging.getLogger(__name__)


class CataloguePublisher:
    """Publishes this worker's heartbeat and tool catalogue now and periodically until stopped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._published = True  # the last round's fate: log only when it changes
        self._catalogue_due = 0.0  # monotonic time of the next catalogue round
        self._tools: ToolRegistry | None = None
        self.queues: list[str] = []  # what the worker consumes (set when it is ready)

    def publish(self) -> bool:
        """One round (the heartbeat, and the catalogue when it is due); False when Redis did
        not take it."""
        client = connect(redis_address(self.settings))
        keys = Keys(self.settings.key_prefix)
        count = 0
        try:
            if self._tools is None:  # imported once: the modules do not change while serving
                self._tools = load_tools(self.settings.tool_modules)
            tools = self._tools
            # the catalogue first: a producer that sees a tool in a heartbeat finds its
            # published contract (core/live_tools.py)
            if time.monotonic() >= self._catalogue_due:
                count = publish_catalogue(client, keys, tools, self.worker)
                self._catalogue_due = time.monotonic() + self.settings.catalogue_refresh_s
            beat(
                client,
                keys,
                worker=self.worker,
                queue=self.settings.queue,
                tools=tools.names(),
                period_s=self.settings.worker_heartbeat_s,
                queues=self.queues or worker_queues(self.settings, tools),
            )
        except redis.RedisError as exc:
            if self._published:
                log.warning("worker %s: tool catalogue not published (%s)", self.worker, exc)
            self._published = False
            return False
        finally:
            client.close()
        if count and (not self._published or self._thread is None):
            log.info("worker %s published %d tools to the catalogue", self.worker, count)
        self._published = True
        return True

    def start(self) -> None:
        self.publish()
        self._thread = threading.Thread(target=self._loop, name="planloop-catalogue", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and remove the heartbeat: the worker no longer serves anything."""
        self._stop.set()
        client = connect(redis_address(self.settings))
        try:
            forget(client, Keys(self.settings.key_prefix), self.worker)
        except redis.RedisError as exc:  # it expires by itself after a few periods
            log.warning("worker %s: heartbeat not removed (%s)", self.worker, exc)
        finally:
            client.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.worker_heartbeat_s):
            self.publish()


def worker_queues(settings: Settings, tools: ToolRegistry) -> list[str]:
    """The queues a worker of ``settings`` serving ``tools`` consumes (core/routing.py)."""
    return derive_queues(settings.queue, tools.names(), settings.worker_queues)


def consumed_queues(celery_app: Celery) -> list[str]:
    """The queues the worker of ``celery_app`` really consumes (its ``-Q``, or Celery's
    default queue): what its heartbeat tells the supervisors, whatever started it."""
    try:
        return sorted(celery_app.amqp.queues.consume_from)
    except Exception:  # the heartbeat then names the derived queues
        log.warning("worker: the queues it consumes are unknown; publishing the derived ones")
        return []


def publish_while_serving(celery_app: Celery, settings: Settings) -> None:
    """Publish the catalogue while a worker of ``celery_app`` serves, until it shuts down.

    Celery's signals are global: a handler acts only for a worker of its own app, so apps
    built for other jobs (a ping, a test) publish nothing.
    """
    publisher = CataloguePublisher(settings)

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is celery_app:
            # the Celery node name (planloop-123@host) is the name people see elsewhere
            publisher.worker = str(getattr(sender, "hostname", "") or publisher.worker)
            publisher.queues = consumed_queues(celery_app)
            publisher.start()

    def shutdown(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is celery_app:
            publisher.stop()

    worker_ready.connect(ready, weak=False)
    worker_shutdown.connect(shutdown, weak=False)
