"""Prometheus metrics of every Planloop process, and the ways to expose them.

One module-level family per metric (prometheus_client's default registry): the worker, the
supervisor and the console count into them and serve them at ``/metrics``. Label values are
bounded and masked (:func:`label`): tool names, statuses, actions, roles and models, never
params, ids or text a person typed.

Prefork workers: prometheus_client's multiprocess mode, chosen by ``PROMETHEUS_MULTIPROC_DIR``
*before* this module is imported (``planloop worker --pool prefork`` sets it, see
:mod:`core.metrics_dir`); each process writes its own files there and the serving
process sums them (:func:`registry`).

=============================================  ===========  ============================
metric                                          type         labels
=============================================  ===========  ============================
planloop_sessions_ended_total                   counter      status
planloop_sessions_active                        gauge        (read at scrape time)
planloop_steps_total                            counter      tool, status
planloop_steps_dispatched_total                 counter      queue (at most MAX_QUEUES)
planloop_step_duration_seconds                  histogram    tool
planloop_dispatch_overhead_seconds              histogram    (dispatch -> worker start)
planloop_replans_total                          counter      (re-plans counted on budget)
planloop_decisions_total                        counter      action, source
planloop_rounds_total                           counter      (rounds planned after round 1)
planloop_llm_calls_total                        counter      role, model
planloop_llm_tokens_total                       counter      role, model, kind
planloop_llm_cost_usd_total                     counter      role, model
planloop_breaker_open                           gauge        tool (1: open, last seen)
planloop_queue_depth                            gauge        queue (read at scrape time: the
                                                             base queue, live workers' queues)
planloop_lease_takeovers_total                  counter      (sessions taken over)
planloop_dead_letters_total                     counter      (stream entries dead-lettered)
planloop_late_effects_total                     counter      tool, outcome (refused/committed)
planloop_console_refused_total                  counter      reason (console only)
planloop_console_streams                        gauge        (console: open SSE streams)
planloop_console_stream_readers                 gauge        (console: Redis readers behind them)
=============================================  ===========  ============================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    make_asgi_app,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from planloop.core.masking import mask_text
from planloop.core.metrics_dir import MULTIPROC_ENV, multiprocess

LABEL_CHARS = 80
# Steps run from milliseconds (bench.echo) to minutes (agent steps).
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
DISPATCH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)

SESSIONS = Counter("planloop_sessions_ended", "Sessions that ended, by status.", ["status"])
STEPS = Counter(
    "planloop_steps", "Step attempts that ended, by tool and status.", ["tool", "status"]
)
STEP_SECONDS = Histogram(
    "planloop_step_duration_seconds", "Run time of step attempts, by tool.", ["tool"],
    buckets=STEP_BUCKETS,
)  # fmt: skip
DISPATCH_SECONDS = Histogram(
    "planloop_dispatch_overhead_seconds",
    "From the supervisor queueing an attempt to a worker starting it (clocks of two hosts).",
    buckets=DISPATCH_BUCKETS,
)
REPLANS = Counter("planloop_replans", "Re-plans (each counts against a session's budget).")
DECISIONS = Counter(
    "planloop_decisions",
    "Decisions on context changes, by action and source.",
    ["action", "source"],
)
ROUNDS = Counter("planloop_rounds", "Rounds planned after a critic's verdict (round 2 on).")
LLM_CALLS = Counter("planloop_llm_calls", "LLM calls, by role and model.", ["role", "model"])
LLM_TOKENS = Counter(
    "planloop_llm_tokens", "LLM tokens, by role, model and kind.", ["role", "model", "kind"]
)
LLM_COST = Counter(
    "planloop_llm_cost_usd", "LLM cost in US dollars (PLANLOOP_LLM_PRICES).", ["role", "model"]
)
BREAKER_OPEN = Gauge(
    "planloop_breaker_open",
    "1 when a tool's circuit breaker was last seen open by a worker, 0 once it ran again.",
    ["tool"],
    multiprocess_mode="mostrecent",
)
LEASE_TAKEOVERS = Counter(
    "planloop_lease_takeovers", "Sessions a supervisor took over from an expired lease."
)
DEAD_LETTERS = Counter("planloop_dead_letters", "Stream entries moved to the dead letters.")
DISPATCHED = Counter(
    "planloop_steps_dispatched", "Step attempts a supervisor queued, by queue.", ["queue"]
)
LATE_EFFECTS = Counter(
    "planloop_late_effects",
    "Effects asked for after their attempt timed out, by tool and outcome (refused: "
    "nothing applied; committed: already applying, recorded against the step).",
    ["tool", "outcome"],
)
CONSOLE_REFUSED = Counter(
    "planloop_console_refused",
    "Console requests refused before any work, by reason (host, body_size, stream_cap, "
    "cross_origin, not_json; status_401/status_403: any answer of those statuses).",
    ["reason"],
)
CONSOLE_STREAMS = Gauge("planloop_console_streams", "Live streams (SSE) the console holds open.")
CONSOLE_STREAM_READERS = Gauge(
    "planloop_console_stream_readers",
    "Redis readers behind the console's live streams (one per followed session).",
)
# Queue label values one process uses at most: pool queues are one per distinct worker
# build, but a plan's `queue:` is text a person typed. Beyond this many, "other".
MAX_QUEUES = 64
OTHER_QUEUE = "other"


@lru_cache(maxsize=4096)
def label(value: str) -> str:
    """A label value: masked (a model or tool name could carry a URL's password) and cut
    short. Cached: the hot path labels the same few tools over and over."""
    text = mask_text(str(value))
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 3] + "..."


# --- counting -----------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _step_children(tool: str, status: str) -> tuple[Any, Any]:
    # prometheus_client's labels() takes a lock and builds a key each time (~4 us): a
    # step's children are looked up once per (tool, status) and kept.
    name = label(tool)
    return STEPS.labels(name, status), STEP_SECONDS.labels(name)


_dispatched: dict[str, Any] = {}  # queue -> its counter child (bounded by MAX_QUEUES)


def count_dispatched(queue: str) -> None:
    """One attempt queued to ``queue`` (the supervisor's hot path: the child is kept)."""
    child = _dispatched.get(queue)
    if child is None:
        name = label(queue) if len(_dispatched) < MAX_QUEUES else OTHER_QUEUE
        child = _dispatched[queue] = DISPATCHED.labels(name)
    child.inc()


_breakers: dict[str, bool] = {}  # per process: the state last set, so a set is a change


def count_step(tool: str, status: str, duration_s: float, overhead_s: float | None) -> None:
    """One attempt ended on a worker."""
    steps, seconds = _step_children(tool, status)
    steps.inc()
    seconds.observe(duration_s)
    if overhead_s is not None:
        DISPATCH_SECONDS.observe(max(overhead_s, 0.0))


def count_breaker(tool: str, is_open: bool) -> None:
    """A worker saw ``tool``'s breaker open, or the tool complete (closed)."""
    if _breakers.get(tool) is is_open:
        return
    _breakers[tool] = is_open
    BREAKER_OPEN.labels(label(tool)).set(1 if is_open else 0)


def count_late_effect(tool: str, outcome: str) -> None:
    """An effect after its attempt's timeout: ``refused`` or ``committed``."""
    LATE_EFFECTS.labels(label(tool), outcome).inc()


PRICES: dict[str, Any] = {}
"""Model prices for ``planloop_llm_cost_usd`` (the supervisor sets its PLANLOOP_LLM_PRICES)."""


def count_llm_call(role: str, model: str, prompt: int, completion: int) -> None:
    """One LLM call; its cost priced by :data:`PRICES` (a model without a price costs 0)."""
    from planloop.core.llm_budget import cost_usd as price_of

    cost_usd = price_of(model, prompt, completion, PRICES) if model in PRICES else 0.0
    r, m = label(role), label(model)
    LLM_CALLS.labels(r, m).inc()
    LLM_TOKENS.labels(r, m, "prompt").inc(prompt)
    LLM_TOKENS.labels(r, m, "completion").inc(completion)
    if cost_usd:
        LLM_COST.labels(r, m).inc(cost_usd)


def count_decision(action: str, source: str) -> None:
    DECISIONS.labels(label(action), label(source)).inc()


def count_session_end(status: str) -> None:
    SESSIONS.labels(label(status)).inc()


# --- exposing -----------------------------------------------------------------------------
class QueueDepth(Collector):
    """``planloop_queue_depth``: the length of each step queue, read when scraped."""

    def __init__(self, lengths: Callable[[], Mapping[str, int]]) -> None:
        self.lengths = lengths

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "planloop_queue_depth", "Step messages waiting in a queue.", labels=["queue"]
        )
        try:
            lengths = self.lengths()
        except Exception:  # Redis down: the scrape still answers, without the gauge
            lengths = {}
        for queue, length in lengths.items():
            family.add_metric([queue], length)
        yield family


class ActiveSessions(Collector):
    """``planloop_sessions_active``: sessions not yet ended, read when scraped."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            value = self.count()
        except Exception:  # Redis down: the scrape still answers, without the gauge
            return
        yield GaugeMetricFamily("planloop_sessions_active", "Sessions not yet ended.", value)


# Atomically: take the lease when free, keep it when ours (refreshing its TTL); 1 if ours.
_HOLD_LEASE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class SharedGauges(Collector):
    """Gauges read from shared state (queue depth, active sessions), exported by one
    process of the deployment: whichever supervisor holds the Redis lease ``key``. Every
    supervisor reads the same Redis, so each exporting them would make a dashboard's
    ``sum`` count them once per supervisor. The lease outlives a few scrapes (``ttl_s``);
    when its holder stops, another supervisor's next scrape after it expires takes over.
    """

    def __init__(
        self, client: Any, key: str, owner: str, ttl_s: float, gauges: Iterable[Collector]
    ) -> None:
        self.client = client
        self.key = key
        self.owner = owner
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.gauges = list(gauges)

    def holds(self) -> bool:
        try:
            return bool(self.client.eval(_HOLD_LEASE, 1, self.key, self.owner, self.ttl_ms))
        except Exception:  # Redis down: the gauges could not be read either
            return False

    def collect(self) -> Iterable[Any]:
        if not self.holds():
            return
        for gauge in self.gauges:
            yield from gauge.collect()


def redis_queue_lengths(client: Any, queues: list[str]) -> Callable[[], dict[str, int]]:
    """Queue lengths read with LLEN (kombu's Redis transport keeps a queue in one list)."""

    def lengths() -> dict[str, int]:
        return {q: int(client.llen(q)) for q in queues}

    return lengths


def registry(extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """The registry to serve: this process's metrics, or every process's in multiprocess
    mode; plus ``extra`` collectors (queue depth)."""
    served = CollectorRegistry()
    if multiprocess():
        MultiProcessCollector(served)  # type: ignore[no-untyped-call]
    else:
        # A registry of its own around the global one: each server or app gets its own
        # extra collectors, and two apps in one process (tests) do not collide.
        served.register(REGISTRY)
    for collector in extra:
        served.register(collector)
    return served


def exposition(served: CollectorRegistry | None = None) -> bytes:
    """The text exposition of ``served`` (default: :func:`registry`)."""
    return generate_latest(served or registry())


def metrics_app(extra: Iterable[Collector] = ()) -> Any:
    """An ASGI app serving ``/metrics`` (the console mounts it)."""
    return make_asgi_app(registry(extra))


def serve(port: int, address: str = "127.0.0.1", extra: Iterable[Collector] = ()) -> None:
    """Serve ``/metrics`` on ``address:port`` from a daemon thread of this process."""
    start_http_server(port, addr=address, registry=registry(extra))


def process_exited(pid: int) -> None:
    """A prefork child exited: drop its live gauges (multiprocess mode only)."""
    if multiprocess():
        mark_process_dead(pid)  # type: ignore[no-untyped-call]


__all__ = ["MULTIPROC_ENV", "exposition", "metrics_app", "registry", "serve"]
