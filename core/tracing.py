"""OpenTelemetry traces, when ``PLANLOOP_OTEL_ENDPOINT`` is set (the ``otel`` extra).

One trace per session. Its trace id and the id of its root span are derived from the
session id, so every process that works on a session (the supervisor that plans it, another
one after a takeover, the workers) puts its spans into the same trace without sharing any
state:

* **session** — the root span, emitted when the session ends (``started_at`` → end);
* **step <id> #<attempt>** — one per attempt, on the worker: the supervisor puts the W3C
  ``traceparent`` (a child of the session's root) into the Celery message's headers and the
  worker continues it;
* **llm <role>** — one per LLM call, emitted when its usage is recorded (it ends then and
  started ``latency_s`` before).

Without the endpoint (or without the extra) every helper here is a no-op costing one
attribute check. Spans carry ids, tool names, statuses and token counts: never params,
prompts or outputs.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from planloop.config.settings import Settings

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"  # the W3C header, as Celery message header
SESSION: contextvars.ContextVar[str] = contextvars.ContextVar("planloop_session", default="")
"""The session the current asyncio task (a supervisor's session loop) works on."""
_FORCED: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "planloop_forced_ids", default=None
)


def session_ids(sid: str) -> tuple[int, int]:
    """The trace id and root span id of session ``sid`` (never 0, as W3C requires)."""
    digest = hashlib.sha256(f"planloop-session:{sid}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def session_traceparent(sid: str) -> str:
    """The W3C ``traceparent`` of session ``sid``'s root span (sampled)."""
    trace_id, span_id = session_ids(sid)
    return f"00-{trace_id:032x}-{span_id:016x}-01"


class Tracing:
    """This process's tracer, built on first use (again after a fork: the exporter's thread
    does not survive one)."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.service = "planloop"
        self.exporter: Any = None  # tests hand an exporter of their own
        self._tracer: Any = None
        self._provider: Any = None
        self._pid = 0

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint) or self.exporter is not None

    def tracer(self) -> Any:
        if self._tracer is not None and self._pid == os.getpid():
            return self._tracer
        self._tracer, self._pid = self._build(), os.getpid()
        return self._tracer

    def _build(self) -> Any:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        except ImportError:
            log.warning(
                "PLANLOOP_OTEL_ENDPOINT is set but OpenTelemetry is not installed: "
                "pip install 'planloop[otel]'; no traces are sent"
            )
            self.endpoint, self.exporter = "", None
            return None
        exporter = self.exporter
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=traces_url(self.endpoint))

        class SessionIds(RandomIdGenerator):
            """Random ids, except the session root span's derived ones."""

            def generate_span_id(self) -> int:
                return _forced_span_id() or super().generate_span_id()

            def generate_trace_id(self) -> int:
                return _forced_trace_id() or super().generate_trace_id()

        provider = TracerProvider(
            resource=Resource.create({"service.name": self.service}),
            id_generator=SessionIds(),
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        self._provider = provider
        return provider.get_tracer("planloop")

    def flush(self, timeout_s: float = 5.0) -> None:
        """Export the spans still buffered (a process about to exit, a test)."""
        if self._provider is not None:
            self._provider.force_flush(int(timeout_s * 1000))


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector ``endpoint`` (a bare host gets ``/v1/traces``)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def _forced_span_id() -> int | None:
    forced = _FORCED.get()
    return forced[1] if forced else None


def _forced_trace_id() -> int | None:
    forced = _FORCED.get()
    return forced[0] if forced else None


TRACING = Tracing()
"""This process's tracing: :func:`configure` turns it on."""


def configure(settings: Settings, service: str, exporter: Any = None) -> None:
    """Trace this process to ``settings.otel_endpoint`` (nothing when unset and no
    ``exporter`` is given) as ``service``."""
    TRACING.endpoint = settings.otel_endpoint or ""
    TRACING.service = service
    TRACING.exporter = exporter
    TRACING._tracer = None


def _parent(traceparent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent})


def step_headers(sid: str) -> dict[str, str]:
    """Headers a step message carries: the session's trace context (none when off)."""
    return {TRACEPARENT: session_traceparent(sid)} if TRACING.enabled else {}


@contextmanager
def step_span(traceparent: str | None, attributes: dict[str, Any]) -> Iterator[Any]:
    """A span around one step attempt on a worker, continuing ``traceparent``."""
    tracer = TRACING.tracer() if TRACING.enabled and traceparent else None
    if tracer is None:
        yield None
        return
    name = f"step {attributes.get('planloop.step', '')} #{attributes.get('planloop.attempt', 0)}"
    with tracer.start_as_current_span(
        name, context=_parent(traceparent or ""), attributes=attributes
    ) as span:
        yield span


def llm_span(role: str, model: str, prompt: int, completion: int, latency_s: float) -> None:
    """A span for one LLM call of the current session (:data:`SESSION`), ending now."""
    sid = SESSION.get()
    tracer = TRACING.tracer() if TRACING.enabled and sid else None
    if tracer is None:
        return
    end = time.time_ns()
    span = tracer.start_span(
        f"llm {role}",
        context=_parent(session_traceparent(sid)),
        start_time=end - int(latency_s * 1e9),
        attributes={
            "planloop.session": sid,
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": prompt,
            "gen_ai.usage.output_tokens": completion,
            "planloop.role": role,
        },
    )
    span.end(end_time=end)


def session_span(sid: str, status: str, started_at: float, finished_at: float) -> None:
    """The session's root span, with its derived ids: emitted once, when it ends."""
    tracer = TRACING.tracer() if TRACING.enabled else None
    if tracer is None:
        return
    from opentelemetry.context import Context

    token = _FORCED.set(session_ids(sid))
    try:
        span = tracer.start_span(
            "session",
            context=Context(),  # a root: no parent, the derived trace id
            start_time=int((started_at or finished_at) * 1e9),
            attributes={"planloop.session": sid, "planloop.status": status},
        )
    finally:
        _FORCED.reset(token)
    span.end(end_time=int(finished_at * 1e9))
