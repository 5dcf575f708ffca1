"""Big values: Redis and process memory around one session with one large step output.

Run from the repo root: ``python bench/big_values.py [--size-mb 20]``.

A private redis-server (so its memory peak is this run's alone), one worker and one
supervisor run a session of two steps: ``big`` returns a string of ``--size-mb`` MB
(``bench.sleep`` with ``payload_bytes``), ``after`` references a small field of it (or,
with ``--pass-along``, the big string itself). Printed once the session has ended and its
record is written: Redis ``used_memory_peak`` and ``used_memory``, the blobs left in Redis
and their TTLs, the size of what the SQL record holds (outputs, report, events), and the
peak RSS (``VmHWM``) of the worker and the supervisor.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from config.settings import Settings
from core.hot_state import connect
from core.record import SqlRecord
from planner.plan import Plan
from producer.client import Producer
from producer.stack import EmbeddedRedis, Stack
from workers.toolsets import BENCH_TOOLS


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (``VmHWM``), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def run(size_mb: float, *, pass_along: bool) -> dict[str, object]:
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
    try:
        worker = stack.start_worker(2)
        supervisor = stack.start_supervisor()
        plan = Plan.model_validate(
            {
                "goal": "one big output",
                "steps": [
                    {
                        "id": "big",
                        "tool": "bench.sleep",
                        "params": {"payload_bytes": int(size_mb * 1_000_000)},
                        "timeout_s": 120,
                    },
                    {
                        "id": "after",
                        "tool": "bench.echo",
                        "params": {
                            "value": "{{big.output.payload}}"
                            if pass_along
                            else "{{big.output.slept}}"
                        },
                        "dependencies": ["big"],
                    },
                ],
            }
        )
        producer = Producer.from_settings(settings)
        sid = producer.submit(plan)
        record = producer.wait(sid, timeout_s=300)
        sql = SqlRecord.from_url(settings.database_url)

        def recorded() -> bool:
            row = sql.session(sid)
            return row is not None and row.status == record.status.value

        wait(recorded, 60, "the SQL record of the end")
        client = connect(server.url)
        info = client.info("memory")
        blobs = {
            key: {"bytes": client.memory_usage(key), "ttl_s": client.ttl(key)}
            for key in client.scan_iter(match="bv:blob:*")
        }
        big_keys = sorted(
            key for key in client.scan_iter(count=1000) if (client.memory_usage(key) or 0) > 1e6
        )
        row = sql.session(sid)
        sql_mb = {
            "attempt_outputs": sum(len(a.output or "") for a in sql.attempts(sid)) / 1e6,
            "report": len(row.report or "") / 1e6 if row else 0.0,
            "events": sum(len(e.payload) + len(e.description) for e in sql.events(sid)) / 1e6,
        }
        return {
            "status": record.status.value,
            "sql_mb": {name: round(mb, 3) for name, mb in sql_mb.items()},
            "size_mb": size_mb,
            "redis_used_memory_peak_mb": round(int(info["used_memory_peak"]) / 1e6, 1),
            "redis_used_memory_mb": round(int(info["used_memory"]) / 1e6, 1),
            "redis_dataset_mb": round(int(info["used_memory_dataset"]) / 1e6, 1),
            "redis_clients_mb": round(int(info["mem_clients_normal"]) / 1e6, 1),
            "blobs": blobs,
            "keys_over_1mb": big_keys,
            "worker_peak_rss_mb": round(peak_rss_mb(worker.pid), 1),
            "supervisor_peak_rss_mb": round(peak_rss_mb(supervisor.pid), 1),
        }
    finally:
        stack.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=20.0)
    parser.add_argument(
        "--pass-along", action="store_true", help="The second step takes the whole big value."
    )
    args = parser.parse_args()
    print(json.dumps(run(args.size_mb, pass_along=args.pass_along), indent=2))


if __name__ == "__main__":
    main()
