"""What ``planloop submit`` pays in imports before it does anything, beside ``import redis``.

Each case runs in a fresh interpreter (``--runs`` times, median): the child times its own
imports (wall and CPU seconds from the first import to the last, interpreter start left out)
and prints them. The cases:

* ``import redis``: the floor; submit talks to Redis and nothing else.
* ``planloop submit --help``: the CLI module and the command's help.
* ``planloop submit`` path: the CLI and what the command imports to submit a plan file
  (the producer client, the plan loader, the input limits).
* ``import celery, kombu``: for scale, what the submit path must not load.

The ratio is the case's CPU time over ``import redis``'s (CPU: other processes on a shared
machine stretch the wall time, much less the CPU time). ``--python`` times another
install (e.g. main's venv, for a before/after); the children run in an empty temporary
directory, so they import that interpreter's Planloop, not the checkout's folders.

Run from the repo root: ``python bench/import_time.py`` or ``python -m bench.import_time``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from bench.common import print_table

TIMED = """
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
{body}
print(json.dumps({{
    "wall": time.perf_counter() - wall,
    "cpu": time.process_time() - cpu,
    "loaded": [m for m in ("celery", "kombu", "billiard") if m in sys.modules],
}}))
"""

HELP = """
import contextlib, io
from planloop.producer.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["submit", "--help"])
"""

SUBMIT = """
from planloop.producer.cli import main
import planloop.core.input_limits, planloop.planner.plan, planloop.producer.client
"""

CASES = (
    ("import redis", "import redis"),
    ("planloop submit --help", HELP),
    ("planloop submit path", SUBMIT),
    ("import celery, kombu", "import celery, kombu.transport.redis"),
)


def time_case(python: str, body: str, cwd: str) -> dict[str, object]:
    """One fresh interpreter's timing of ``body``."""
    done = subprocess.run(
        [python, "-c", TIMED.format(body=body)],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--python", default=sys.executable, help="the interpreter to time")
    args = parser.parse_args()
    rows, floor = [], 0.0
    with tempfile.TemporaryDirectory(prefix="planloop-import-time-") as cwd:
        time_case(args.python, "import planloop", cwd)  # warm the file cache and .pyc files
        for name, body in CASES:
            runs = [time_case(args.python, body, cwd) for _ in range(args.runs)]
            wall = statistics.median(float(str(r["wall"])) for r in runs)
            cpu = statistics.median(float(str(r["cpu"])) for r in runs)
            floor = floor or cpu
            loaded = ", ".join(runs[0]["loaded"]) or "-"  # type: ignore[arg-type]
            rows.append(
                [name, f"{wall * 1e3:.0f}", f"{cpu * 1e3:.0f}", f"{cpu / floor:.1f}x", loaded]
            )
    print_table(
        f"import time, median of {args.runs} fresh interpreters ({args.python}; "
        f"load {os.getloadavg()[0]:.1f})",
        ["case", "wall ms", "cpu ms", "vs import redis", "celery-side modules loaded"],
        rows,
    )


if __name__ == "__main__":
    main()
