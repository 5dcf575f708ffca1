"""The console's admin endpoints: lessons (list, add, disable, enable, delete) and the
settings (read-only, secrets masked), for the ``admin`` role only.

Every endpoint here goes through :func:`console.guard.admin_only` (a viewer or an operator
gets 403 naming the role it needs); the ones that change something are actions like the
operators' (JSON body, this console's own Origin: :func:`console.guard.action_refused`) and
log who did what. A disabled lesson's reason names its actor, so ``planloop lessons show``
tells who disabled it. The lessons are the same store and checks as ``planloop lessons``
(producer/lesson_add.py); blocking SQL and embedding calls run in a thread.

=======  =====================================  =========================================
method   path                                   does
=======  =====================================  =========================================
GET      /api/admin/lessons                     every lesson with its measured effect
POST     /api/admin/lessons                     add one: goal_pattern, root_cause,
                                                avoidance, suggestion, toolsets
POST     /api/admin/lessons/{id}/disable        stop giving it to prompts (``reason``)
POST     /api/admin/lessons/{id}/enable         give it again
POST     /api/admin/lessons/{id}/delete         delete it and its uses
GET      /api/admin/settings                    the settings, every secret masked
=======  =====================================  =========================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import anyio
import redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from planloop.config.settings import Settings
from planloop.console.guard import action_refused, admin_only, identity_of
from planloop.core import json_input
from planloop.core.errors import PlanloopError
from planloop.core.masking import mask

if TYPE_CHECKING:
    from planloop.core.lessons import LessonStore

log = logging.getLogger(__name__)

ROW_ID_MAX = 2**63 - 1  # a SQL integer key (producer/cli/options.py)
LESSON_FIELDS = ("goal_pattern", "root_cause", "avoidance", "suggestion", "toolsets")


class AdminEndpoints:
    """The admin endpoints of one console, on its settings' SQL record."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def store(self) -> LessonStore:
        from planloop.core.lessons import LessonStore
        from planloop.core.record import make_engine

        return LessonStore(make_engine(self.settings.database_url))

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/api/admin/lessons", self.list_lessons, methods=["GET"]),
            Route("/api/admin/lessons", self.add_lesson, methods=["POST"]),
            Route("/api/admin/lessons/{lesson}/{change}", self.change_lesson, methods=["POST"]),
            Route("/api/admin/settings", self.read_settings, methods=["GET"]),
        ]

    @admin_only("read lessons")
    async def list_lessons(self, _request: Request) -> Response:
        from planloop.core.lessons import Thresholds
        from planloop.producer.lesson_views import stats_doc

        thresholds = Thresholds(
            self.settings.lessons_min_similarity, self.settings.lessons_min_lexical_similarity
        )
        stats = await _blocking(lambda: self.store.stats(thresholds=thresholds))
        return JSONResponse({"lessons": [mask(stats_doc(s)) for s in stats]})

    @admin_only("add lessons")
    async def add_lesson(self, request: Request) -> Response:
        from planloop.producer import lesson_add as seed

        body = await _action_body(request)
        if isinstance(body, Response):
            return body
        unknown = sorted(set(body) - set(LESSON_FIELDS))
        if unknown:
            return _refused(f"a lesson takes {', '.join(LESSON_FIELDS)}", 400)
        try:
            seeded = seed.parse_seeded(body)
            lesson_id, merged = await _blocking(
                lambda: seed.add_seeded(self.store, seeded, self.settings, self._served())
            )
        except PlanloopError as exc:
            return _refused(str(exc), 400)
        actor = identity_of(request).name
        log.info("console admin %s added lesson %d (merged: %s)", actor, lesson_id, merged)
        return JSONResponse({"ok": True, "id": lesson_id, "merged": merged, "actor": actor})

    def _served(self) -> dict[str, str]:
        """The live tools' versions a new lesson is scoped to (none while Redis is away:
        the lesson is then kept without them, never marked stale by a version)."""
        from planloop.producer.lesson_add import live_versions

        try:
            return live_versions(self.settings)
        except redis.RedisError as exc:
            log.warning("console admin: tool versions not read (Redis: %s)", exc)
            return {}

    @admin_only("change lessons")
    async def change_lesson(self, request: Request) -> Response:
        lesson_id = _lesson_id(request.path_params["lesson"])
        change = request.path_params["change"]
        if lesson_id is None:
            return _refused("a lesson id is a positive integer", 404)
        body = await _action_body(request)
        if isinstance(body, Response):
            return body
        actor = identity_of(request).name
        reason = body.get("reason", "disabled from the console")
        if not isinstance(reason, str) or not reason.strip():
            return _refused("reason must be a non-empty string", 400)
        changes: dict[str, Callable[[], bool]] = {
            "disable": lambda: self.store.disable(lesson_id, f"{reason} (by {actor})"),
            "enable": lambda: self.store.enable(lesson_id),
            "delete": lambda: self.store.delete(lesson_id),
        }
        if change not in changes:
            return _refused(f"a lesson can be {', '.join(changes)}", 404)
        try:
            found = await _blocking(changes[change])
        except PlanloopError as exc:
            return _refused(str(exc), 400)
        if not found:
            return _refused(f"no lesson {lesson_id}", 404)
        log.info("console admin %s: %s lesson %d", actor, change, lesson_id)
        return JSONResponse({"ok": True, "id": lesson_id, "change": change, "actor": actor})

    @admin_only("read the settings")
    async def read_settings(self, _request: Request) -> Response:
        # SecretStr fields dump as "**********"; URL passwords and known values: the masker
        return JSONResponse({"settings": mask(self.settings.model_dump(mode="json"))})


async def _blocking(call: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(call)


async def _action_body(request: Request) -> dict[str, Any] | Response:
    """A changing request's JSON object, or the refusal (cross-origin, not JSON, ...)."""
    refused = action_refused(request)
    if refused is not None:
        return refused
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json_input.loads(raw)
    except json_input.JsonInputError as exc:
        return _refused(f"the body is not usable JSON: {exc}", 400)
    if not isinstance(body, dict):
        return _refused("the body must be a JSON object", 400)
    return body


def _lesson_id(text: str) -> int | None:
    if not text.isdigit() or len(text) > 19:
        return None
    number = int(text)
    return number if 1 <= number <= ROW_ID_MAX else None


def _refused(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
