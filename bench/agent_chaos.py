"""Sessions against a hostile model: do they all end, answer, and count every call?

A real stack (Redis, one supervisor, one worker, SQLite) plans, decides, critiques, answers
and runs agent steps with the scripted server in its seeded chaos mode (tests/llm_chaos.py):
at ``--rate`` each answer is a plausible wrong thing (empty, partial or invalid JSON, prose
around JSON, a refusal, unknown tools or params, a huge text, 429, 500, a stalled or cut
stream, an answer past the client timeout). The sessions come in the shapes of
tests/chaos_sessions.py (goal planning, routing, parallel agent steps, critique rounds, an
answer schema, token and cost budgets, a short deadline), ``--at-once`` at a time.

Printed: sessions, ended (before deadline), answered, crash loops, stuck (running steps,
leases or unacked events left after the end), usage recorded / served (tokens the record
holds for the run's sessions over the usage the server reported; 1.00 is exact), budget
overruns (a session whose spend without its last call is already over a budget).

Run from the repo root: ``python bench/agent_chaos.py [--sessions N] [--seed S]``; the
default (220 sessions) takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from pydantic import SecretStr

from bench.common import bench_env, console, planloop_stack, print_table
from planloop.core.record import SqlRecord
from tests.chaos_sessions import recheck_stuck, run_sessions, session_spec, settled_usage
from tests.llm_chaos import Chaos
from tests.llm_server import ScriptedLLMServer

CLIENT_TIMEOUT_S = 1.5


def chaos_settings(base_url: str) -> dict[str, object]:
    """The stack's LLM settings: a short client timeout (slow answers exceed it), one retry,
    streamed plans, embeddings, a priced model (cost budgets)."""
    return {
        "llm_base_url": base_url,
        "llm_api_key": SecretStr("test"),
        "llm_model": "gpt-4o-mini",
        "llm_timeout_s": CLIENT_TIMEOUT_S,
        "llm_max_retries": 1,
        "llm_stream_plans": True,
        "llm_embedding_model": "chaos-embed",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=220)
    parser.add_argument("--seed", type=int, default=0, help="first session seed")
    parser.add_argument("--rate", type=float, default=0.3, help="share of hostile answers")
    parser.add_argument("--at-once", type=int, default=4, help="sessions running together")
    args = parser.parse_args()

    with ScriptedLLMServer(streams=True) as server:
        server.chaos = Chaos(args.seed, rate=args.rate, client_timeout_s=CLIENT_TIMEOUT_S)
        with (
            bench_env("chaos", **chaos_settings(server.base_url)) as bench,
            planloop_stack(bench) as (_stack, producer),
        ):
            record = SqlRecord.from_url(bench.settings.database_url)
            specs = [session_spec(args.seed + i) for i in range(args.sessions)]
            started = time.monotonic()
            verdicts = run_sessions(
                specs, producer, bench.settings, bench.redis, record, at_once=args.at_once
            )
            elapsed = time.monotonic() - started
            recorded, served = settled_usage(record, [v.sid for v in verdicts], server)
            recheck_stuck(verdicts, bench.settings, bench.redis)
            faults = server.chaos.faults

    served_tokens = served["prompt_tokens"] + served["completion_tokens"]
    recorded_tokens = recorded["prompt_tokens"] + recorded["completion_tokens"]
    ratio = recorded_tokens / served_tokens if served_tokens else float("nan")
    rows = [
        ("sessions", str(len(verdicts))),
        ("ended", str(sum(v.ended_in_time for v in verdicts))),
        ("answered", str(sum(v.answered for v in verdicts))),
        ("crash loops", str(sum(1 for v in verdicts if v.crashes))),
        ("stuck", str(sum(1 for v in verdicts if v.stuck))),
        ("usage recorded / served", f"{ratio:.2f} ({recorded_tokens} / {served_tokens} tokens)"),
        ("calls recorded / served", f"{recorded['calls']} / {served['calls']}"),
        ("budget overruns", str(sum(1 for v in verdicts if v.overrun))),
        ("answers off their schema", str(sum(1 for v in verdicts if v.off_schema))),
        ("wall time", f"{elapsed:.0f} s"),
    ]
    print_table(f"agent chaos: rate {args.rate}, seeds {args.seed}..", ["", "value"], rows)
    statuses = Counter(f"{v.shape}:{v.status}" for v in verdicts)
    console.print("statuses: " + ", ".join(f"{k} {n}" for k, n in sorted(statuses.items())))
    console.print("answers served: " + ", ".join(f"{k} {n}" for k, n in faults.most_common()))
    for v in verdicts:
        if v.broken:
            console.print(
                f"seed {v.seed} ({v.shape}, {v.sid}): {'; '.join(v.broken)} | {v.error[:200]}"
            )


if __name__ == "__main__":
    main()
