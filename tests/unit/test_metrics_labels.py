"""Metric labels are bounded and masked; counting moves the families the dashboard reads."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from planloop.core import metrics
from planloop.core.metrics import LABEL_CHARS, QueueDepth, exposition, label


def _value(name: str, labels: dict[str, str]) -> float:
    for family in text_string_to_metric_families(exposition().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def test_a_label_never_carries_a_password_and_stays_short() -> None:
    assert "hunter2" not in label("https://user:hunter2@llm.example/v1")
    assert "sk-abcdef" not in label("api_key=sk-abcdef")
    assert len(label("t" * 500)) == LABEL_CHARS
    assert label("bench.echo") == "bench.echo"


def test_counting_a_step_moves_steps_duration_and_dispatch() -> None:
    labels = {"tool": "unit.tool", "status": "failed"}
    before = _value("planloop_steps_total", labels)
    dispatched = _value("planloop_dispatch_overhead_seconds_count", {})
    metrics.count_step("unit.tool", "failed", 0.2, 0.003)
    metrics.count_step("unit.tool", "failed", 0.2, None)  # dispatch time unknown: not observed
    assert _value("planloop_steps_total", labels) == before + 2
    assert _value("planloop_dispatch_overhead_seconds_count", {}) == dispatched + 1


def test_llm_calls_are_priced_by_the_configured_prices() -> None:
    from planloop.config.settings import ModelPrice

    metrics.PRICES["unit-model"] = ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)
    metrics.count_llm_call("planner", "unit-model", 1_000_000, 500_000)
    labels = {"role": "planner", "model": "unit-model"}
    assert _value("planloop_llm_cost_usd_total", labels) == 2.0
    assert _value("planloop_llm_tokens_total", {**labels, "kind": "completion"}) == 500_000


def test_queue_depth_is_read_at_scrape_time_and_a_broken_read_is_skipped() -> None:
    depth = {"q": 3}
    served = CollectorRegistry()
    served.register(QueueDepth(lambda: depth))
    assert b'planloop_queue_depth{queue="q"} 3.0' in exposition(served)
    depth["q"] = 0
    assert b'planloop_queue_depth{queue="q"} 0.0' in exposition(served)

    def broken() -> dict[str, int]:
        raise ConnectionError("redis down")

    failing = CollectorRegistry()
    failing.register(QueueDepth(broken))
    assert b"planloop_queue_depth{" not in exposition(failing)


def test_the_grafana_dashboard_reads_only_metrics_we_export() -> None:
    import json
    import re
    from pathlib import Path

    board = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "planloop.json"
    exprs = [t["expr"] for p in json.loads(board.read_text())["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"planloop_[a-z_]+", e)}
    served = CollectorRegistry()
    served.register(QueueDepth(lambda: {"q": 0}))
    served.register(metrics.ActiveSessions(lambda: 0))
    text = exposition(served).decode() + exposition().decode()
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    families = list(text_string_to_metric_families(text))
    exported |= {f.name for f in families} | {f"{f.name}_total" for f in families}
    missing = {m for m in used if m not in exported and f"{m}_bucket" not in exported}
    assert not missing, f"the dashboard reads metrics nobody exports: {sorted(missing)}"


def test_the_console_can_mount_an_asgi_metrics_app() -> None:
    import asyncio

    metrics.metrics_app(extra=[QueueDepth(lambda: {"q": 1})])  # one app per console
    app = metrics.metrics_app(extra=[QueueDepth(lambda: {"q": 2})])  # no clash: its own registry
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/metrics", "query_string": b"",
             "headers": []}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent)  # type: ignore[misc]
    assert b"planloop_steps_total" in body or b"# TYPE planloop_steps counter" in body
    assert b'planloop_queue_depth{queue="q"} 2.0' in body
