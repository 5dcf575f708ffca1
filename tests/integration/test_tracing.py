"""Traces on the real stack: a worker and a supervisor export to an OTLP/HTTP receiver run by
the test; a session is one trace, its step attempts children of the session's root span."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from planloop.core.models import SessionStatus
from planloop.core.tracing import session_ids
from planloop.planner.plan import Plan
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack

pytestmark = pytest.mark.integration


class Receiver(ThreadingHTTPServer):
    """Collects the spans POSTed to /v1/traces: (service, name, trace id, span id, parent id)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        got = []
        for resource in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    got.append(
                        {
                            "service": attrs.get("service.name"),
                            "name": span.name,
                            "trace": int.from_bytes(span.trace_id, "big"),
                            "span": int.from_bytes(span.span_id, "big"),
                            "parent": int.from_bytes(span.parent_span_id, "big")
                            if span.parent_span_id
                            else 0,
                        }
                    )
        with self.server.lock:
            self.server.spans.extend(got)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_session_is_one_trace_with_a_span_per_step_attempt(
    private_stack: MakeStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export spans within 0.1 s
    stack = private_stack(otel_endpoint=receiver.url)
    plan = {
        "goal": "two steps, one retried",
        "steps": [
            {"id": "a", "tool": "bench.echo", "params": {"value": 1}},
            {
                "id": "b",
                "tool": "bench.sleep",
                "params": {"seconds": 0.01, "simulate": {"fail_attempts": [1]}},
                "dependencies": ["a"],
                "max_retries": 1,
            },
        ],
    }
    sid = stack.producer.submit(Plan.model_validate(plan))
    assert stack.finish(sid, ["a", "b"]).status == SessionStatus.COMPLETED
    trace_id, root_id = session_ids(sid)

    def session_spans() -> dict[str, dict[str, Any]] | None:
        with receiver.lock:
            ours = {s["name"]: s for s in receiver.spans if s["trace"] == trace_id}
        return ours if {"session", "step a #1", "step b #1", "step b #2"} <= set(ours) else None

    spans = wait_for(session_spans, 20, "the session's spans at the receiver")
    assert spans["session"]["span"] == root_id
    assert spans["session"]["service"] == "planloop-supervisor"
    for name in ("step a #1", "step b #1", "step b #2"):
        assert spans[name]["parent"] == root_id, name
        assert spans[name]["service"] == "planloop-worker"
