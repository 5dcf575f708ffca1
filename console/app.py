"""The console's ASGI app: pages, JSON endpoints, the live stream and the actions.

Reads go through :mod:`console.data` (the producer's own views); actions through
:class:`producer.client.Producer`, exactly what the CLI sends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from planloop.config.settings import Settings
from planloop.console import data, step_detail
from planloop.console.admin import AdminEndpoints
from planloop.console.guard import (
    Authenticator,
    ConsoleAuth,
    action_refused,
    identity_of,
    role_refused,
)
from planloop.console.hardening import Hardening, allowed_hosts
from planloop.console.lineage_actions import LINEAGE_ACTIONS, lineage_call
from planloop.console.live_hub import LiveHub
from planloop.console.llm_view import may_read_transcripts, transcript_of
from planloop.console.session_list import ListQuery, list_sessions
from planloop.console.stream_slots import StreamSlots
from planloop.console.users import ConsoleLogin, Role, console_login
from planloop.core import json_input, metrics
from planloop.core.errors import (
    CommandRefusedError,
    ContinueRefusedError,
    PlanloopError,
    SessionEndedError,
    SessionNotFoundError,
    StepNotFoundError,
)
from planloop.producer.client import ACTIONS, Producer

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
# The role each action needs (console/users.py); an action not listed here is unknown.
ACTION_ROLES = {
    **dict.fromkeys(("approve", "reject", "signal", "retry", "skip", "cancel"), Role.OPERATOR),
    # a fork starts a new session, a continue reopens an ended one: an administrator's call
    **dict.fromkeys(LINEAGE_ACTIONS, Role.ADMIN),
}


def error_response(exc: Exception) -> JSONResponse:
    """A PlanloopError (or Redis being away) as JSON with the status that fits."""
    if isinstance(exc, SessionNotFoundError | StepNotFoundError):
        return JSONResponse({"error": str(exc)}, status_code=404)
    if isinstance(exc, SessionEndedError | CommandRefusedError | ContinueRefusedError):
        # the state forbids it
        return JSONResponse({"error": str(exc)}, status_code=409)
    if isinstance(exc, redis.RedisError):
        return JSONResponse({"error": f"Redis is unreachable: {exc}"}, status_code=503)
    return JSONResponse({"error": str(exc)}, status_code=400)


def metrics_routes() -> list[BaseRoute]:
    """``/metrics`` (and ``/metrics/``, neither redirecting: a scraper need not follow one):
    this process's own metrics. The gauges read from shared state (queue depth, active
    sessions) are a supervisor's to export (core/metrics.py ``SharedGauges``): exported here
    too, a dashboard's sum would count them twice."""
    app = AsgiEndpoint(metrics.metrics_app())
    return [Route("/metrics", app), Route("/metrics/", app)]


class AsgiEndpoint:
    """An ASGI app as a Route's endpoint (a plain function would be taken for a
    request -> response handler)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class Endpoints:
    """The console's endpoints over one producer."""

    def __init__(self, client: Producer, slots: StreamSlots) -> None:
        self.client = client
        self.hub = LiveHub(client)
        self.slots = slots

    @staticmethod
    def page(name: str) -> Callable[[Request], Response]:
        def serve(_request: Request) -> Response:
            return FileResponse(STATIC / name, headers={"Cache-Control": "no-store"})

        return serve

    @staticmethod
    def reading(read: Callable[[Request], Any]) -> Callable[[Request], Response]:
        """A JSON endpoint (run in a thread by Starlette: it blocks on Redis and SQL)."""

        def endpoint(request: Request) -> Response:
            try:
                return JSONResponse(read(request))
            except (PlanloopError, redis.RedisError) as exc:
                return error_response(exc)

        return endpoint

    def list_sessions(self, request: Request) -> Any:
        return list_sessions(self.client, ListQuery.from_params(request.query_params))

    def one_session(self, request: Request) -> Any:
        detail = data.session_detail(self.client, request.path_params["sid"])
        return {**detail, "may_read_transcripts": may_read_transcripts(request.scope)}

    def timeline(self, request: Request) -> Any:
        return data.session_timeline(self.client, request.path_params["sid"])

    def one_step(self, request: Request) -> Any:
        sid, step = request.path_params["sid"], request.path_params["step"]
        _session, plans, report, _events = data.session_plans(self.client, sid)
        hidden = data.hidden_params(self.client, plans)
        return step_detail.step_detail(self.client, sid, step, plans, report, hidden)

    def step_output(self, request: Request) -> Any:
        sid, step = request.path_params["sid"], request.path_params["step"]
        _session, plans, _report, _events = data.session_plans(self.client, sid)
        hidden = data.hidden_params(self.client, plans)
        return {"output": step_detail.full_output(self.client, sid, step, plans, hidden)}

    def llm_transcript(self, request: Request) -> Response:
        """A call's prompt and response: only for the roles that may read them."""
        if not may_read_transcripts(request.scope):
            return JSONResponse(
                {"error": "prompts and responses are shown to operators and admins only"},
                status_code=403,
            )
        sid = request.path_params["sid"]
        try:
            call_id = int(request.path_params["call"])
            found = transcript_of(self.client.record, sid, call_id)
        except ValueError:
            found = None
        except (PlanloopError, redis.RedisError) as exc:
            return error_response(exc)
        if found is None:
            return JSONResponse({"error": f"session {sid!r} has no such LLM call"}, 404)
        return JSONResponse(found)

    async def stream(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        return self.slots.response(request.scope, lambda: self.hub.follow(sid))

    @staticmethod
    def me(request: Request) -> Response:
        """Who is logged in and what they may do (the pages hide what they may not)."""
        who = identity_of(request)
        return JSONResponse(
            {
                "user": who.name,
                "role": who.role.value,
                "may_act": who.role.allows(Role.OPERATOR),
                "may_administer": who.role.allows(Role.ADMIN),
            }
        )

    async def action(self, request: Request) -> Response:
        name = request.path_params["action"]
        refused = role_refused(request, ACTION_ROLES.get(name, Role.OPERATOR), name)
        if refused is not None:
            metrics.CONSOLE_REFUSED.labels("role").inc()
            return refused
        refused = action_refused(request)
        if refused is not None:
            reason = "cross_origin" if refused.status_code == 403 else "not_json"
            metrics.CONSOLE_REFUSED.labels(reason).inc()
            return refused
        try:
            body = json_input.loads(await request.body())
        except json_input.JsonInputError as exc:  # duplicate keys, overlong numbers: refused
            return JSONResponse({"error": f"the body is not usable JSON: {exc}"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
        sid, actor = request.path_params["sid"], identity_of(request).name
        try:
            result = await _run_action(self.client, sid, name, body, actor)
        except (PlanloopError, redis.RedisError) as exc:
            return error_response(exc)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        log.info("console action %s on session %s by %s: %s", name, sid, actor, result)
        return JSONResponse({"ok": True, "result": result})

    @staticmethod
    def health(_request: Request) -> Response:
        return JSONResponse({"ok": True})


def create_app(
    settings: Settings, producer: Producer | None = None, login: ConsoleLogin | None = None
) -> Starlette:
    """The console for ``settings``; its users are ``login``'s (default: the configured
    ones, console/users.py). Hardened for browsers (:mod:`console.hardening`): served to
    the Host names of ``console_address``, loopback and ``console_allowed_hosts``.

    Raises:
        CredentialsError: no login can be had for the console's address.
    """
    login = login or console_login(settings, settings.console_address)
    slots = StreamSlots(settings.console_streams_per_user, settings.console_streams_total)
    api = Endpoints(producer or Producer.from_settings(settings), slots)
    routes: list[BaseRoute] = [
        Route("/", api.page("index.html")),
        Route("/sessions/{sid}", api.page("session.html")),
        Route("/healthz", api.health),
        Route("/api/me", api.me),
        Route("/api/sessions", api.reading(api.list_sessions)),
        Route("/api/sessions/{sid}", api.reading(api.one_session)),
        Route("/api/sessions/{sid}/stream", api.stream),
        Route("/api/sessions/{sid}/timeline", api.reading(api.timeline)),
        Route("/api/sessions/{sid}/steps/{step}", api.reading(api.one_step)),
        Route("/api/sessions/{sid}/steps/{step}/output", api.reading(api.step_output)),
        Route("/api/sessions/{sid}/llm/{call}", api.llm_transcript),
        Route("/api/sessions/{sid}/{action}", api.action, methods=["POST"]),
        *AdminEndpoints(settings).routes(),  # admin only (console/admin.py)
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
        *metrics_routes(),
    ]
    hardening = Middleware(
        Hardening,
        hosts=allowed_hosts(settings.console_address, settings.console_allowed_hosts),
        max_body_bytes=settings.console_max_body_bytes,
    )
    auth = Middleware(ConsoleAuth, authenticator=Authenticator(login, settings))
    # outermost first: a foreign Host or an oversized body is refused before auth reads it
    return Starlette(routes=routes, middleware=[hardening, auth])


async def _run_action(
    client: Producer, sid: str, name: str, body: dict[str, Any], actor: str
) -> str:
    """Carry out action ``name`` through the producer as ``actor`` (in a thread: it blocks
    on Redis).

    Raises:
        ValueError: an unknown action or a missing field.
        PlanloopError: what the producer raises (no such session, ended, input limits).
    """
    import anyio

    note, step = _text(body, "note"), _text(body, "step")
    call: Callable[[], object]
    if name == "approve":
        choice = _text(body, "action").lower()
        if bool(step) == bool(choice) or (choice and choice not in ACTIONS):
            raise ValueError(f"approve takes a step or an action ({', '.join(ACTIONS)})")
        call = lambda: client.approve(  # noqa: E731
            sid, choice or None, note, step=step or None, actor=actor
        )
    elif name == "reject":
        # a step waiting for approval is skipped; a session waiting on its spent re-plan
        # budget aborts
        if step:
            call = lambda: client.skip_step(  # noqa: E731
                sid, step, note or "approval rejected", actor=actor
            )
        else:
            call = lambda: client.approve(sid, "abort", note or "rejected", actor=actor)  # noqa: E731
    elif name == "signal":
        text = _text(body, "text").strip()
        if not text:
            raise ValueError("signal needs a text")
        constraint = body.get("constraint", True)
        if not isinstance(constraint, bool):
            raise ValueError("signal's constraint must be true or false")
        call = lambda: client.signal(sid, text, constraint=constraint, actor=actor)  # noqa: E731
    elif name == "cancel":
        call = lambda: client.cancel(  # noqa: E731
            sid, note or "cancelled from the console", actor=actor
        )
    elif name in ("retry", "skip"):
        if not step:
            raise ValueError(f"{name} needs a step")
        method = client.retry_step if name == "retry" else client.skip_step
        call = lambda: method(sid, step, note, actor=actor)  # noqa: E731
    elif name in LINEAGE_ACTIONS:
        call = lineage_call(client, sid, name, body, actor)
    else:
        raise ValueError(f"unknown action {name!r}")
    return str(await anyio.to_thread.run_sync(call))


def _text(body: dict[str, Any], field: str) -> str:
    """A text field of an action's body ("" when absent); the producer checks its limits.

    Raises:
        ValueError: the field is not a string (never coerced: ``str({...})`` is no note).
    """
    value = body.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, got {type(value).__name__}")
    return value
