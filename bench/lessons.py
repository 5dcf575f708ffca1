"""Do lessons help? A seeded series of sessions without lessons and with them, side by side.

Four goal families, three wordings each. In three of them the obvious approach fails most of
the time (the primary supplier is out, a short sales window misleads, the shop's stock
lags the ERP); the fourth never fails (a distractor: lessons must not leak into it). The
scripted planner takes the failing approach unless its prompt holds a lesson naming the
right one; a failed approach costs a re-plan, which succeeds less often (time is lost).

What runs for real: the planner (:class:`planner.agents.Planner`, plans validated against
the bundled tools), the reflector with its sanitizing, the lesson store on SQLite with its
search, merging and bounds (:class:`supervisor.lessons.LessonMemory`), and the scripted
server's embeddings (hashed bags of words). What is simulated: the model (a twin that reads
its prompt) and the outcome of each approach (seeded draws, the same for both series).

Printed: success rate and re-plans per session without and with lessons; then retrieval
precision and recall of the right lesson on a labelled set of new goals, with embeddings and
with the lexical fallback.

Run from the repo root: ``python bench/lessons.py [--sessions 60] [--seed 7]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.lessons import LessonStore
from planloop.core.models import SessionStatus
from planloop.core.record import make_engine
from planloop.core.tools import ToolRegistry, load_tools
from planloop.planner.agents import Planner
from planloop.planner.embedding import NoEmbedder
from planloop.planner.llm import Role, Usage
from planloop.planner.reflection import SessionStory
from planloop.supervisor.lessons import Ended, LessonMemory, advice
from tests.llm_server import hashed_embedding

T = TypeVar("T", bound=BaseModel)
P_WRONG_FAILS = 0.85  # the obvious approach fails this often
P_RIGHT_OK = 0.95  # the right approach, planned up front, succeeds this often
P_REPLAN_OK = 0.75  # the right approach after a failed one (time lost) succeeds this often


@dataclass(frozen=True)
class Family:
    """Goals that share a pitfall, the approaches, and the lesson that avoids it."""

    name: str
    wordings: tuple[str, ...]
    wrong: tuple[tuple[str, dict[str, Any]], ...]  # (tool, params) steps
    right: tuple[tuple[str, dict[str, Any]], ...]
    marker: str  # what a lesson that helps says (the planner twin looks for it)
    lesson: str
    pitfall: bool = True


SKUS = [f"SKU-{n:03d}" for n in range(1, 40)]
CATEGORIES = ["garden", "kitchen", "toys", "outdoor", "office"]
FAMILIES = (
    Family(
        "restock",
        (
            "Restock {sku} of category {cat} from the primary supplier",
            "Restock {sku} ({cat}) from the primary supplier before the weekend",
            "Reorder {sku} of category {cat} from the primary supplier",
        ),
        (("supply_chain.verify_supplier", {"sku": "{sku}", "supplier_id": "primary"}),),
        (("supply_chain.alternative_suppliers", {"sku": "{sku}"}),),
        "alternative supplier",
        "The primary supplier is often out when restocking; check an alternative supplier "
        "(supply_chain.alternative_suppliers) in parallel.",
    ),
    Family(
        "demand",
        (
            "Forecast next month's demand for {sku} in {cat}",
            "Forecast the demand for {sku} of category {cat} for next month",
            "Estimate next month's demand forecast for {sku} ({cat})",
        ),
        (("ecommerce.order_stats", {"product_id": "{sku}", "days": 7}),),
        (("ecommerce.order_stats", {"product_id": "{sku}", "days": 90}),),
        "90-day window",
        "A short sales window misleads demand forecasts; read order_stats over a 90-day window.",
    ),
    Family(
        "stock",
        (
            "Check how many units of {sku} are in stock in the {cat} warehouse",
            "Check the units of {sku} in stock for the {cat} warehouse",
            "How many units of {sku} are in stock in the {cat} warehouse right now",
        ),
        (("ecommerce.inventory", {"product_id": "{sku}"}),),
        (("supply_chain.erp_stock", {"sku": "{sku}"}),),
        "read stock from the ERP",
        "The shop's inventory lags the warehouse; read stock from the ERP "
        "(supply_chain.erp_stock).",
    ),
    Family(
        "reviews",
        (
            "Summarize customer reviews of {sku} in {cat}",
            "Summarize what customers say in reviews of {sku} ({cat})",
            "Give a summary of the customer reviews for {sku} of category {cat}",
        ),
        (("ecommerce.reviews", {"product_id": "{sku}"}),),
        (("ecommerce.reviews", {"product_id": "{sku}"}),),
        "no lesson needed",
        "",
        pitfall=False,
    ),
)


@dataclass(frozen=True)
class Goal:
    family: Family
    text: str
    sku: str


class HashedEmbedder:
    """The scripted server's embeddings, in-process."""

    model = "hashed-bow"

    def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        return [hashed_embedding(t) for t in texts]


class TwinChat:
    """The model: plans the right approach only when a lesson in the prompt names it."""

    def __init__(self, goal: Goal) -> None:
        self.goal = goal
        self.saw_lesson = False

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        prompt = "\n".join(m["content"] for m in messages)
        family = self.goal.family
        if role == Role.REFLECTOR:
            answer: dict[str, Any] = {
                "lessons": [
                    {
                        "trigger": f"{family.wrong[0][0]} did not work",
                        "lesson": family.lesson,
                        "applies_to": {"toolsets": _toolsets(family.right)},
                        "evidence": "the first approach failed and was re-planned",
                    }
                ]
            }
        else:
            lessons = prompt.split("## Lessons from earlier sessions", 1)[-1]
            lessons = lessons.split("## Tools", 1)[0]
            self.saw_lesson = family.marker.lower() in lessons.lower()
            steps = family.right if self.saw_lesson else family.wrong
            answer = {"goal": self.goal.text, "steps": _steps(steps, self.goal.sku)}
        return schema.model_validate(answer), Usage(0, 0, 0.0, "twin", str(role))


def _steps(steps: Sequence[tuple[str, dict[str, Any]]], sku: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"s{n}",
            "tool": tool,
            "params": {k: v.format(sku=sku) if isinstance(v, str) else v for k, v in p.items()},
        }
        for n, (tool, p) in enumerate(steps, 1)
    ]


def _toolsets(steps: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    return sorted({tool.split(".")[0] for tool, _ in steps})


def goals(count: int, seed: int) -> list[Goal]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        family = rng.choice(FAMILIES)
        sku, cat = rng.choice(SKUS), rng.choice(CATEGORIES)
        text = rng.choice(family.wordings).format(sku=sku, cat=cat)
        out.append(Goal(family, text, sku))
    return out


@dataclass
class Series:
    sessions: int = 0
    succeeded: int = 0
    replans: int = 0
    saw_lesson: int = 0

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.sessions if self.sessions else 0.0

    @property
    def replans_per_session(self) -> float:
        return self.replans / self.sessions if self.sessions else 0.0


def run_series(
    series_goals: Sequence[Goal], seed: int, tools: ToolRegistry, memory: LessonMemory | None
) -> Series:
    """Every goal as one session: retrieve, plan, run (seeded draws), conclude."""
    result = Series()
    for n, goal in enumerate(series_goals):
        sid = f"b{n:04d}"
        draws = random.Random(f"{seed}:{n}")  # the same draws with and without lessons
        chat = TwinChat(goal)
        found = memory.retrieve(sid, goal.text, tools.names()) if memory else []
        plan, _ = Planner(chat, tools).plan(goal.text, lessons=advice(found))
        right = chat.saw_lesson or not goal.family.pitfall
        first_try, second_try = draws.random(), draws.random()
        replans = 0
        if right:
            ok = first_try < P_RIGHT_OK
        elif first_try >= P_WRONG_FAILS:
            ok = True  # the obvious approach worked this time
        else:
            replans = 1  # re-planned onto the right approach, late
            ok = second_try < P_REPLAN_OK
        status = SessionStatus.COMPLETED if ok else SessionStatus.FAILED
        result.sessions += 1
        result.succeeded += ok
        result.replans += replans
        result.saw_lesson += chat.saw_lesson
        if memory is not None:
            story = SessionStory(
                goal.text,
                status.value,
                [],
                [f"{s.id} ({s.tool}): {'completed' if ok else 'failed'}" for s in plan.steps],
            )
            memory.chat = chat
            memory.conclude(Ended(sid, status, replans, False, story), goal.text)
    return result


def retrieval_quality(
    memory: LessonMemory, labelled: Sequence[Goal], tools: ToolRegistry
) -> tuple[float, float, int]:
    """(precision, recall, lessons retrieved) of the right family's lesson on ``labelled``."""
    retrieved = relevant = wanted = hits = 0
    for n, goal in enumerate(labelled):
        found = memory.retrieve(f"q{n:04d}", goal.text, tools.names())
        retrieved += len(found)
        right = [f for f in found if goal.family.pitfall and goal.family.marker in f.lesson]
        relevant += len(right)
        if goal.family.pitfall:
            wanted += 1
            hits += bool(right)
    precision = relevant / retrieved if retrieved else 1.0
    recall = hits / wanted if wanted else 1.0
    return precision, recall, retrieved


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--labelled", type=int, default=40, help="Goals of the labelled set.")
    args = parser.parse_args(argv)
    tools = load_tools()
    series_goals = goals(args.sessions, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/lessons.db")
        store = LessonStore(make_engine(settings.database_url))
        memory = LessonMemory(settings, store, HashedEmbedder(), None)
        without = run_series(series_goals, args.seed, tools, None)
        with_lessons = run_series(series_goals, args.seed, tools, memory)
        labelled = goals(args.labelled, args.seed + 1000)
        lexical = LessonMemory(settings, store, NoEmbedder(), None)
        emb_p, emb_r, emb_n = retrieval_quality(memory, labelled, tools)
        lex_p, lex_r, lex_n = retrieval_quality(lexical, labelled, tools)
        rows = store.all()
        stored, merged = len(rows), sum(r.merged for r in rows)
        store.engine.dispose()
    figures = {
        "sessions": args.sessions,
        "without": (without.success_rate, without.replans_per_session),
        "with": (with_lessons.success_rate, with_lessons.replans_per_session),
        "planned_with_lesson": with_lessons.saw_lesson,
        "lessons_stored": stored,
        "lessons_merged": merged,
        "embeddings": (emb_p, emb_r, emb_n),
        "lexical": (lex_p, lex_r, lex_n),
    }
    _print(figures, args.labelled)
    return figures


def _print(f: dict[str, Any], labelled: int) -> None:
    (ws, wr), (ls, lr) = f["without"], f["with"]
    print(f"{f['sessions']} seeded sessions over {len(FAMILIES)} goal families")
    print(f"{'':24}{'without lessons':>18}{'with lessons':>16}{'ratio':>8}")
    print(f"{'success rate':24}{ws:>18.0%}{ls:>16.0%}{(ls / ws if ws else 0):>8.2f}")
    print(f"{'re-plans per session':24}{wr:>18.2f}{lr:>16.2f}{(lr / wr if wr else 0):>8.2f}")
    print(
        f"sessions planned with a matching lesson: {f['planned_with_lesson']}; lessons stored: "
        f"{f['lessons_stored']} ({f['lessons_merged']} near-duplicates merged)"
    )
    print(f"retrieval of the right lesson on {labelled} labelled new goals:")
    for name in ("embeddings", "lexical"):
        p, r, n = f[name]
        print(f"  {name:11} precision {p:.2f}  recall {r:.2f}  ({n} lessons retrieved)")


if __name__ == "__main__":
    main()
