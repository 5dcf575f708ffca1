"""Sends step attempts to the worker pool as Celery tasks, with what Flower shows masked."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery

from config.celery import STEP_TASK, celery_config
from config.settings import Settings
from core.models import StepTaskArgs
from core.tools import ToolRegistry, mask

log = logging.getLogger(__name__)


class Dispatcher:
    """The supervisor's side of the Celery queue: send attempts, revoke them."""

    def __init__(self, settings: Settings, tools: ToolRegistry) -> None:
        self.settings = settings
        self.tools = tools
        self.celery = Celery("planloop-supervisor", set_as_current=False)
        self.celery.conf.update(celery_config(settings))

    def send(self, *attempts: StepTaskArgs) -> None:
        """Queue attempts under their deterministic task ids, through one producer."""
        with self.celery.producer_or_acquire() as producer:
            for args in attempts:
                self._send(args, producer)

    def _send(self, args: StepTaskArgs, producer: Any) -> None:
        sensitive = self.tools.get(args.tool).sensitive_fields() if args.tool in self.tools else ()
        shown = {
            "session": args.session_id,
            "step": args.step_id,
            "attempt": args.attempt,
            "tool": args.tool,
            "params": mask(args.params, sensitive),
        }
        self.celery.send_task(
            STEP_TASK,
            args=[args.model_dump(mode="json")],
            task_id=args.task_id,
            queue=self.settings.queue,
            argsrepr=json.dumps([shown], default=str),
            kwargsrepr="{}",
            producer=producer,
        )

    def revoke(self, task_ids: Iterable[str]) -> None:
        """Ask workers to drop these attempts (a running one is fenced off anyway)."""
        ids = list(task_ids)
        if ids:
            self.celery.control.revoke(ids)

    def close(self) -> None:
        self.celery.close()
