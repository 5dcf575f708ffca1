"""One trace per session: derived ids, step and LLM spans under the session's root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from planloop.config.settings import Settings
from planloop.core import tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(Settings(), "planloop-test", exporter=exporter)
    yield exporter
    tracing.configure(Settings(), "planloop-test")  # off again


def test_without_an_endpoint_nothing_is_traced_or_carried() -> None:
    tracing.configure(Settings(), "planloop-test")
    assert tracing.step_headers("S1") == {}
    with tracing.step_span(None, {}) as span:
        assert span is None


def test_a_sessions_spans_share_one_trace_under_its_root(spans: InMemorySpanExporter) -> None:
    headers = tracing.step_headers("S1")
    with tracing.step_span(headers["traceparent"], {"planloop.step": "a", "planloop.attempt": 2}):
        pass
    token = tracing.SESSION.set("S1")
    try:
        tracing.llm_span("planner", "gpt-x", 120, 30, 0.25)
    finally:
        tracing.SESSION.reset(token)
    tracing.session_span("S1", "completed", 100.0, 160.0)
    tracing.TRACING.flush()

    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert set(by_name) == {"step a #2", "llm planner", "session"}
    trace_id, root_id = tracing.session_ids("S1")
    root = by_name["session"]
    assert (root.context.trace_id, root.context.span_id, root.parent) == (trace_id, root_id, None)
    assert root.end_time - root.start_time == 60 * 10**9
    for name in ("step a #2", "llm planner"):
        span = by_name[name]
        assert span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == root_id
    llm = by_name["llm planner"]
    assert llm.end_time - llm.start_time == 250_000_000
    assert llm.attributes["gen_ai.usage.input_tokens"] == 120


def test_other_sessions_get_other_traces() -> None:
    assert tracing.session_ids("S1")[0] != tracing.session_ids("S2")[0]
    assert tracing.traces_url("http://otel:4318") == "http://otel:4318/v1/traces"
    assert tracing.traces_url("http://otel:4318/v1/traces/") == "http://otel:4318/v1/traces"
