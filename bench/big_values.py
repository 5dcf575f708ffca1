"""Big values: how many copies of one large step output Redis and SQL hold, per value size.

Run from the repo root: ``python bench/big_values.py [--sizes-mib 1 20] [--consumer digest]``.

For each size, a private redis-server (so its memory and peak are this run's alone), one
worker and one supervisor run a session of two steps: ``big`` returns a string of that many
MiB (``bench.sleep`` with ``payload_bytes``); ``after`` takes the whole string through
``{{big.output.payload}}``: ``bench.digest`` (default) answers its hash, so any other copy is
one the runtime made; ``bench.echo`` returns it, a second value of the same size.

Printed side by side, one row per size: the bytes Redis keys hold (sum of MEMORY USAGE)
above the baseline while the second step runs (its task message is queued or unacked then)
and after the end, each in copies of the value (``nan`` mid-run: the second step was over
before it could be measured, or never ran); Redis ``used_memory`` growth and its peak
(these also count clients' buffers and Lua garbage, which come and go); the bytes of
outputs in the SQL record (blobs table and attempt rows, read with plain SQL so older
records measure the same way); the peak RSS of worker and supervisor. The machine is
shared: run it when it is quiet, and compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from sqlalchemy import create_engine, inspect, text

from planloop.config.settings import Settings
from planloop.core.hot_state import connect
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.stack import EmbeddedRedis, Stack
from planloop.workers.toolsets import BENCH_TOOLS

MIB = 1024 * 1024


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def sql_output_bytes(database_url: str) -> int:
    """Bytes of step outputs the record holds: the blobs table plus attempt-row copies."""
    engine = create_engine(database_url)
    tables = set(inspect(engine).get_table_names())
    total = 0
    with engine.connect() as db:
        if "blobs" in tables:
            total += int(
                db.execute(text("SELECT coalesce(sum(length(data)), 0) FROM blobs")).scalar_one()
            )
        total += int(
            db.execute(
                text("SELECT coalesce(sum(length(output)), 0) FROM step_attempts")
            ).scalar_one()
        )
    engine.dispose()
    return total


def stored_bytes(client: Any) -> int:
    """What every key takes (MEMORY USAGE, exact): stored copies, without buffers."""
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in client.scan_iter(count=1000))


def plan_for(size_bytes: int, consumer: str, hold_s: float) -> Plan:
    return Plan.model_validate(
        {
            "goal": "one big output, taken whole by the next step",
            "steps": [
                {
                    "id": "big",
                    "tool": "bench.sleep",
                    "params": {"payload_bytes": size_bytes},
                    "timeout_s": 120,
                    "max_retries": 0,
                },
                {
                    "id": "after",
                    "tool": f"bench.{consumer}",
                    "params": {
                        "value": "{{big.output.payload}}",
                        "simulate": {"latency_s": hold_s},
                    },
                    "dependencies": ["big"],
                },
            ],
        }
    )


def run(size_mib: float, consumer: str, hold_s: float) -> dict[str, Any]:
    server = EmbeddedRedis().start()
    directory = Path(tempfile.mkdtemp(prefix="planloop-bigvalues-"))
    settings = Settings(
        redis_url=server.url,
        key_prefix="bv",
        queue="bv",
        database_url=f"sqlite:///{directory / 'planloop.db'}",
        tool_modules=[BENCH_TOOLS],
    )
    env = {**os.environ, **settings.to_env()}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    stack = Stack(env=env, log_dir=directory)
    size = int(size_mib * MIB)
    try:
        worker = stack.start_worker(2)
        supervisor = stack.start_supervisor()
        producer = Producer.from_settings(settings)
        client = connect(server.url)
        time.sleep(1.0)  # both processes connected and idle
        before, keys_before = int(client.info("memory")["used_memory"]), stored_bytes(client)
        sid = producer.submit(plan_for(size, consumer, hold_s))

        def after_running_or_over() -> bool:
            states = producer.state.steps(sid, ["big", "after"])
            if states["big"].status.value == "failed" or producer.session(sid).status.ended:
                return True
            return states["after"].status.value == "running" and states["after"].started_at > 0

        wait(after_running_or_over, 300, "the second step running")
        keys_during = stored_bytes(client) - keys_before
        # Still running after the measurement: it saw the second step's message in Redis.
        seen = producer.state.steps(sid, ["after"])["after"].status.value == "running"
        record = producer.wait(sid, timeout_s=300)
        sql = SqlRecord.from_url(settings.database_url)

        def recorded() -> bool:
            row = sql.session(sid)
            return row is not None and row.status == record.status.value

        wait(recorded, 60, "the SQL record of the end")
        info = client.info("memory")
        used, peak = int(info["used_memory"]), int(info["used_memory_peak"])
        keys_end = stored_bytes(client) - keys_before
        steps = {s["id"]: s for s in (record.report or {}).get("steps", [])}
        big_step = steps.get("big", {})
        return {
            "size_mib": size_mib,
            "status": record.status.value,
            "big": big_step.get("status"),
            "error": (big_step.get("error") or "")[:60],
            "keys_during_copies": keys_during / size if seen else float("nan"),
            "keys_end_copies": keys_end / size,
            "used_growth_mib": (used - before) / MIB,
            "used_peak_growth_mib": (peak - before) / MIB,
            "used_peak_copies": (peak - before) / size,
            "sql_outputs_mib": sql_output_bytes(settings.database_url) / MIB,
            "sql_copies": sql_output_bytes(settings.database_url) / size,
            "worker_peak_rss_mib": peak_rss_mib(worker.pid),
            "supervisor_peak_rss_mib": peak_rss_mib(supervisor.pid),
        }
    finally:
        stack.stop()
        server.stop()


COLUMNS = (
    ("size_mib", "size MiB", "{:.0f}"),
    ("status", "session", "{}"),
    ("big", "big step", "{}"),
    ("keys_during_copies", "keys copies mid-run", "{:.2f}"),
    ("keys_end_copies", "keys copies at end", "{:.2f}"),
    ("used_growth_mib", "used_memory +MiB", "{:.1f}"),
    ("used_peak_growth_mib", "peak +MiB", "{:.1f}"),
    ("used_peak_copies", "peak copies", "{:.2f}"),
    ("sql_outputs_mib", "SQL MiB", "{:.1f}"),
    ("sql_copies", "SQL copies", "{:.2f}"),
    ("worker_peak_rss_mib", "worker RSS", "{:.0f}"),
    ("supervisor_peak_rss_mib", "superv RSS", "{:.0f}"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=[1.0, 20.0])
    parser.add_argument(
        "--consumer",
        choices=("digest", "echo"),
        default="digest",
        help="What the second step does with the whole value: hash it, or return it.",
    )
    parser.add_argument(
        "--hold-s", type=float, default=2.0, help="Seconds the second step runs (measured then)."
    )
    parser.add_argument("--json", action="store_true", help="One JSON object per size instead.")
    args = parser.parse_args()
    rows = [run(size, args.consumer, args.hold_s) for size in args.sizes_mib]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    print("  ".join(title for _, title, _ in COLUMNS))
    for row in rows:
        print("  ".join(fmt.format(row[name]).rjust(len(title)) for name, title, fmt in COLUMNS))
    for row in rows:
        if row["error"]:
            print(f"{row['size_mib']:g} MiB: {row['error']}...")


if __name__ == "__main__":
    main()
