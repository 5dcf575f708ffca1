"""What idle live viewers cost the console: CPU and Redis commands per second.

N server-sent-event streams (open session pages nobody touches) spread over S sessions that
wait (never dispatched: no supervisor runs, so nothing but the console talks to Redis). Two
consoles are measured one after the other on the same sessions and viewers:

- before: ``main``'s console (``--before-python``, default /work/main/.venv/bin/python when it
  exists): every stream polls Redis every 0.3 s on its own;
- after: this checkout's console: one reader per session (console/live_hub.py), fanned out.

Redis is a private redis-server started for the run (``EmbeddedRedis``), so its
``total_commands_processed`` counts the console's commands only. CPU is the console
process's user + system time over the window (/proc).

    .venv/bin/python bench/console_viewers.py --viewers 300 --sessions 5 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

import redis

from bench.common import REPO_ROOT, cpu_seconds, print_table, redis_pid
from planloop.config.settings import Settings
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import EmbeddedRedis, free_port
from planloop.workers.toolsets import BENCH_TOOLS

MAIN_PYTHON = Path("/work/main/.venv/bin/python")
PLAN = """
goal: a session a viewer watches while nothing happens
steps:
  - {id: wait, tool: bench.echo, params: {value: 1}, requires_approval: true}
  - {id: after, tool: bench.echo, params: {value: 2}, dependencies: [wait]}
"""
CREDENTIALS = "bench:viewers-bench"


@dataclass
class Measured:
    name: str
    viewers: int
    cpu_pct: float
    redis_cmds_s: float
    redis_cpu_pct: float
    rss_mib: float


def start_console(
    python: str, env: dict[str, str], port: int, log: Path
) -> subprocess.Popen[bytes]:
    code = "from planloop.producer.cli import main; main()"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [python, "-c", code, "console", "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd="/tmp",  # the interpreter's own install, not this checkout, is imported
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the console exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)
    raise SystemExit("the console did not answer within 60 s")


async def viewer(port: int, sid: str, joined: asyncio.Event, counter: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    token = base64.b64encode(CREDENTIALS.encode()).decode()
    writer.write(
        (
            f"GET /api/sessions/{sid}/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Basic {token}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise SystemExit(f"a stream was refused: {status!r}")
    counter[0] += 1
    if counter[0] == counter[1]:
        joined.set()
    try:
        while await reader.read(65536):
            pass
    finally:
        writer.close()


async def watch(port: int, sids: list[str], n: int, seconds: float, measure: object) -> None:
    joined = asyncio.Event()
    counter = [0, n]
    tasks = [
        asyncio.create_task(viewer(port, sids[i % len(sids)], joined, counter)) for i in range(n)
    ]
    await asyncio.wait_for(joined.wait(), 120)
    await asyncio.sleep(3)  # past the first full reads
    await asyncio.get_running_loop().run_in_executor(None, measure, seconds)  # type: ignore[arg-type]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def measure_console(
    name: str, python: str, env: dict[str, str], sids: list[str], args: argparse.Namespace
) -> Measured:
    port = free_port()
    log = Path(env["BENCH_DIR"]) / f"console-{name}.log"
    proc = start_console(python, env, port, log)
    client = redis.Redis.from_url(env["PLANLOOP_REDIS_URL"])
    rpid = redis_pid(client)
    result: dict[str, float] = {}

    def window(seconds: float) -> None:
        cpu0, cmds0 = cpu_seconds(proc.pid) or 0.0, commands(client)
        rcpu0 = cpu_seconds(rpid) if rpid else None
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        result["cpu"] = ((cpu_seconds(proc.pid) or 0.0) - cpu0) / elapsed * 100
        result["cmds"] = (commands(client) - cmds0 - 2) / elapsed  # less the two INFOs
        rcpu1 = cpu_seconds(rpid) if rpid else None
        result["rcpu"] = (rcpu1 - rcpu0) / elapsed * 100 if rcpu0 is not None and rcpu1 else 0.0
        result["rss"] = rss_mib(proc.pid)

    try:
        asyncio.run(watch(port, sids, args.viewers, args.seconds, window))
    finally:
        proc.terminate()
        proc.wait(15)
        client.close()
    return Measured(
        name, args.viewers, result["cpu"], result["cmds"], result["rcpu"], result["rss"]
    )


def commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])  # type: ignore[index]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewers", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--before-python",
        default=str(MAIN_PYTHON) if MAIN_PYTHON.exists() else "",
        help="a Python with main's planloop installed ('' skips the before run)",
    )
    args = parser.parse_args()
    embedded = EmbeddedRedis().start()
    directory = embedded.directory
    settings = Settings(
        redis_url=embedded.url,
        key_prefix="viewers",
        queue="viewers",
        database_url=f"sqlite:///{directory / 'planloop.db'}",
        tool_modules=[BENCH_TOOLS],
        flower_basic_auth=CREDENTIALS,  # type: ignore[arg-type]
        console_streams_per_user=args.viewers + 10,
        console_streams_total=args.viewers + 10,
    )
    env = {**os.environ, **settings.to_env(), "BENCH_DIR": str(directory)}
    env["PYTHONPATH"] = ""  # each console imports its own interpreter's planloop
    try:
        producer = Producer.from_settings(settings)
        sids = [producer.submit(parse_plan(PLAN)) for _ in range(args.sessions)]
        runs = []
        if args.before_python:
            runs.append(measure_console("before (main)", args.before_python, env, sids, args))
        after_python = str(REPO_ROOT / ".venv" / "bin" / "python")
        runs.append(measure_console("after (shared reader)", after_python, env, sids, args))
    finally:
        embedded.stop()
    print_table(
        f"{args.viewers} idle SSE viewers over {args.sessions} sessions, {args.seconds:g} s",
        ["console", "viewers", "console CPU %", "Redis cmds/s", "Redis CPU %", "RSS MiB"],
        [
            [
                m.name,
                str(m.viewers),
                f"{m.cpu_pct:.1f}",
                f"{m.redis_cmds_s:.0f}",
                f"{m.redis_cpu_pct:.1f}",
                f"{m.rss_mib:.0f}",
            ]
            for m in runs
        ],
    )
    if len(runs) == 2:
        before, after = runs
        cpu_ratio = before.cpu_pct / max(after.cpu_pct, 0.01)
        cmd_ratio = before.redis_cmds_s / max(after.redis_cmds_s, 0.01)
        print(f"ratios before/after: console CPU {cpu_ratio:.1f}x, Redis commands {cmd_ratio:.1f}x")


if __name__ == "__main__":
    main()
