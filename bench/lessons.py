"""Do lessons help? The same sessions on the real stack without lessons and with them.

Each arm is its own real stack (a Celery worker process, a supervisor process, Redis, the
SQL record on SQLite) planning with the scripted OpenAI-compatible server of the tests,
whose planning roles act as a model that repeats a mistake unless a lesson is in its
prompt (bench/lessons_twin.py): restocking goals whose primary supplier really is out
(``supply_chain.verify_supplier`` fails for good on the worker), and review summaries that
never fail (a distractor: no lesson may reach them). Sessions run one after another, each
with a re-plan budget of 1. In the "with" arm the supervisor's reflector writes a lesson
after a session that went wrong, and later sessions' prompts get it from the lesson store
(embedded by the server's ``/v1/embeddings``); in the "without" arm lessons are off.

Then retrieval precision and recall on a labelled corpus of goals vs lessons with
paraphrases and near-miss distractors (bench/lessons_retrieval.py), for each embeddings
backend: the endpoint (the scripted server's hashed bags of words), local (all-MiniLM-L6-v2
from the ``local-embeddings`` extra; shown as not installed without it) and lexical.

Run from the repo root: ``python bench/lessons.py [--sessions 30] [--seed 7]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from pydantic import SecretStr

from bench.common import bench_env, planloop_stack, print_table, wait_for
from bench.lessons_retrieval import TABLE_COLUMNS, Quality, measure, table_rows
from bench.lessons_twin import TwinServer, goals
from planloop.config.settings import Settings
from planloop.core.errors import ConfigError
from planloop.core.heartbeat import live_workers
from planloop.core.keys import Keys
from planloop.core.lessons import LessonStore
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.record import make_engine
from planloop.planner.embedding import NoEmbedder, OpenAIEmbedder
from planloop.planner.local_embedding import EXTRA_COMMAND, LocalEmbedder

SESSION_TIMEOUT_S = 90.0
LESSON_WAIT_S = 15.0  # for the reflector's lesson after a session that went wrong


@dataclass
class Arm:
    name: str
    sessions: int = 0
    succeeded: int = 0
    replans: int = 0
    pitfall_sessions: int = 0
    planned_with_lesson: int = 0
    leaked: int = 0  # distractor sessions whose planner prompt held a lesson
    lessons_stored: int = 0
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.sessions if self.sessions else 0.0

    @property
    def replans_per_session(self) -> float:
        return self.replans / self.sessions if self.sessions else 0.0


def run_arm(twin: TwinServer, arm_goals: Sequence[Any], lessons_on: bool) -> Arm:
    """Every goal as one session of a fresh stack, one after another."""
    twin.reset()
    twin.planned_with_lesson = 0
    arm = Arm("with lessons" if lessons_on else "without lessons")
    overrides = {
        "llm_base_url": twin.base_url,
        "llm_api_key": SecretStr("bench"),
        "llm_max_retries": 0,
        "lessons_enabled": lessons_on,
        "max_replans": 1,
        "lessons_embedding_backend": "endpoint",
    }
    started = time.monotonic()
    with bench_env("lessons", **overrides) as bench, planloop_stack(bench) as (_, producer):
        keys = Keys(bench.settings.key_prefix)
        wait_for(lambda: live_workers(bench.redis, keys, bench.settings.queue), 60, "a live worker")
        store = LessonStore(make_engine(bench.settings.database_url))
        for goal in arm_goals:
            twin.expect(goal)
            learned = _learned(store)
            sid = producer.submit_goal(goal.text, options=SessionOptions(mode="plan"))
            wait_for(lambda s=sid: producer.session(s).status.ended, SESSION_TIMEOUT_S, sid, 0.05)
            session = producer.session(sid)
            arm.sessions += 1
            arm.succeeded += session.status == SessionStatus.COMPLETED
            arm.replans += session.replans
            arm.pitfall_sessions += goal.family.pitfall
            if not goal.family.pitfall:
                planner = twin.requests_for("planner")
                arm.leaked += bool(planner) and "Advice from an earlier session" in (
                    planner[-1].prompt_text
                )
            went_wrong = session.status != SessionStatus.COMPLETED or session.replans
            if lessons_on and went_wrong and goal.family.pitfall:
                _wait_for_lesson(store, learned)
        arm.lessons_stored = len(store.all())
        store.engine.dispose()
    arm.seconds = time.monotonic() - started
    arm.planned_with_lesson = twin.planned_with_lesson
    served = twin.served_usage()
    arm.calls, arm.tokens = served["calls"], served["prompt_tokens"] + served["completion_tokens"]
    return arm


def _learned(store: LessonStore) -> int:
    """Lessons written so far, a merge counting as one more."""
    return sum(1 + row.merged for row in store.all())


def _wait_for_lesson(store: LessonStore, before: int) -> None:
    deadline = time.monotonic() + LESSON_WAIT_S
    while time.monotonic() < deadline and _learned(store) <= before:
        time.sleep(0.1)


def retrieval(twin: TwinServer) -> list[tuple[str, str, Quality | None]]:
    """Precision/recall of each backend on the labelled corpus."""
    settings = Settings(llm_base_url=twin.base_url, llm_api_key="bench", llm_max_retries=0)
    endpoint = OpenAIEmbedder(settings)
    results: list[tuple[str, str, Quality | None]] = [
        ("endpoint", "server's /v1/embeddings (hashed words)", measure(endpoint, settings))
    ]
    endpoint.close()
    try:
        local = LocalEmbedder()
    except ConfigError:
        results.append(("local", f"not installed: {EXTRA_COMMAND}", None))
    else:
        results.append(("local", "all-MiniLM-L6-v2, in-process", measure(local, settings)))
    results.append(("lexical", "none (word overlap)", measure(NoEmbedder(), settings)))
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--sessions", type=int, default=30, help="Sessions per arm.")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    arm_goals = goals(args.sessions, args.seed)
    with TwinServer() as twin:
        without = run_arm(twin, arm_goals, lessons_on=False)
        with_lessons = run_arm(twin, arm_goals, lessons_on=True)
        quality = retrieval(twin)
    _print(without, with_lessons, quality)
    return {"without": without, "with": with_lessons, "retrieval": quality}


def _print(without: Arm, with_: Arm, quality: list[tuple[str, str, Quality | None]]) -> None:
    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}" if a else "-"

    rows = [
        ["success rate", f"{without.success_rate:.0%}", f"{with_.success_rate:.0%}"],
        [
            "re-plans per session",
            f"{without.replans_per_session:.2f}",
            f"{with_.replans_per_session:.2f}",
        ],
        ["LLM calls served", str(without.calls), str(with_.calls)],
        ["tokens served", str(without.tokens), str(with_.tokens)],
        ["seconds", f"{without.seconds:.0f}", f"{with_.seconds:.0f}"],
    ]
    rows[0].append(ratio(without.success_rate, with_.success_rate))
    rows[1].append(ratio(without.replans_per_session, with_.replans_per_session))
    rows[2].append(ratio(without.calls, with_.calls))
    rows[3].append(ratio(without.tokens, with_.tokens))
    rows[4].append(ratio(without.seconds, with_.seconds))
    title = (
        f"{without.sessions} sessions per arm on the real stack "
        f"({without.pitfall_sessions} with the primary supplier out, "
        f"{without.sessions - without.pitfall_sessions} distractors)"
    )
    print_table(title, ["", "without lessons", "with lessons", "with / without"], rows)
    print(
        f"with lessons: {with_.planned_with_lesson} plans or re-plans followed a lesson; "
        f"{with_.lessons_stored} lessons stored; distractor prompts holding a lesson: "
        f"{with_.leaked}"
    )
    print_table(
        "Lesson retrieval on the labelled corpus (20 goals: 6 close, 8 paraphrases, 6 near misses)",
        TABLE_COLUMNS,
        table_rows(quality),
    )


if __name__ == "__main__":
    main()
