"""Submitting a big plan file end to end, beside the floors it cannot beat.

A 10,000-step plan with about 20,000 edges (the plan of ``bench/validation.py``) and a
20,000-step chain are written as a JSON and a YAML file, then each is submitted the way
``planloop submit FILE`` does it: ``load_plan`` (read, parse, schema and input limits), then
``Producer.submit`` (the stored form re-read under the limits, ``validate_plan``, one Redis
transaction). Beside each: the parser alone (``json.loads``; PyYAML's C loader
``yaml.load(..., CSafeLoader)``, which does less than ``load_plan``'s safe path) and one
Redis ``SET`` of the stored JSON. The ratio is end to end / (parser + SET).

CPU seconds of this process, best of ``--runs`` (the machine is shared; the load is
printed); the SET in wall seconds. Redis: db 14
of 127.0.0.1:6379 (or an embedded one), a private key prefix, deleted at the end.

Run from the repo root: ``python bench/submit.py`` or ``python -m bench.submit``.
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

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import bench_env, print_table
from bench.validation import build_plan
from planloop.core.hot_state import HotState
from planloop.core.input_limits import InputLimits
from planloop.core.keys import Keys
from planloop.core.tools import load_tools
from planloop.planner.plan import Plan, load_plan
from planloop.producer.client import Producer

CASES = ((10_000, False), (20_000, True))
TARGET_S = 1.0
# CPU seconds of this process for the stages (other engineers' load does not count), wall
# seconds for the Redis SET (the work is in redis-server).
CPU = time.process_time
WALL = time.perf_counter


def best_of(runs: int, work: Callable[[], object], clock: Callable[[], float]) -> float:
    """Seconds on ``clock`` of the fastest of ``runs`` runs."""
    best = float("inf")
    for _ in range(runs):
        start = clock()
        work()
        best = min(best, clock() - start)
    return best


def write_files(plan: Plan, directory: Path) -> dict[str, Path]:
    """The plan as a ``.json`` and a ``.yaml`` file, defaults left out as a person would."""
    data: Any = plan.model_dump(mode="json", exclude_defaults=True)
    paths = {"json": directory / "plan.json", "yaml": directory / "plan.yaml"}
    paths["json"].write_text(json.dumps(data, indent=1), encoding="utf-8")
    paths["yaml"].write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Runs per case; the best counts.")
    args = parser.parse_args()
    tools = load_tools(["planloop.workers.toolsets.bench"])
    rows: list[list[str]] = []
    summary: list[str] = []
    with bench_env("submit") as bench, tempfile.TemporaryDirectory() as tmp:
        producer = Producer(
            bench.settings, HotState(bench.redis, Keys(bench.settings.key_prefix)), tools
        )
        limits = InputLimits.from_settings(bench.settings)
        scratch = f"{bench.settings.key_prefix}:bench-set"
        for steps, chain in CASES:
            plan = build_plan(steps, chain=chain)
            edges = sum(len(s.dependencies) for s in plan.steps)
            paths = write_files(plan, Path(tmp))
            stored = plan.model_dump_json()
            set_s = best_of(args.runs, lambda: bench.redis.set(scratch, stored), WALL)  # noqa: B023
            for fmt, path in paths.items():
                text = path.read_text(encoding="utf-8")
                floor_parse: Callable[[], object] = (
                    (lambda: json.loads(text))  # noqa: B023
                    if fmt == "json"
                    else (lambda: yaml.load(text, Loader=yaml.CSafeLoader))  # noqa: B023
                )
                parse_floor = best_of(args.runs, floor_parse, CPU)
                load_s = best_of(args.runs, lambda: load_plan(path, limits=limits), CPU)  # noqa: B023
                loaded = load_plan(path, limits=limits)
                submit_s = best_of(args.runs, lambda: producer.submit(loaded), CPU)  # noqa: B023
                e2e = best_of(
                    args.runs,
                    lambda: producer.submit(load_plan(path, limits=limits)),  # noqa: B023
                    CPU,
                )
                floor = parse_floor + set_s
                name = f"{steps:,}{' chain' if chain else ''} {fmt}"
                rows.append(
                    [
                        name,
                        f"{edges:,}",
                        f"{path.stat().st_size / 1e6:.1f}",
                        f"{load_s:.3f}",
                        f"{submit_s:.3f}",
                        f"{e2e:.3f}",
                        f"{parse_floor:.3f}",
                        f"{set_s:.3f}",
                        f"{e2e / floor:.1f}x",
                    ]
                )
                summary.append(f"{name} {e2e:.2f} s ({e2e / floor:.1f}x floor)")
    print_table(
        "planloop submit FILE: load_plan + Producer.submit vs parser + one SET (CPU s; SET wall s)",
        [
            "plan",
            "edges",
            "MB",
            "load_plan",
            "submit",
            "end to end",
            "parser floor",
            "SET",
            "ratio",
        ],
        rows,
    )
    print(f"load average {os.getloadavg()[0]:.1f}; target end to end <= {TARGET_S:g} s")
    print("end to end: " + "; ".join(summary))


if __name__ == "__main__":
    main()
