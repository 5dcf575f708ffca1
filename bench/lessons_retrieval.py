"""Retrieval precision and recall of lessons, per embeddings backend, on a labelled corpus.

Six lessons (each stored as the lesson store keeps one: its source goal's vector as the
key, its text's vector for merging) and labelled new goals of three kinds:

- ``close``: the source goal's wording with another SKU or detail (any backend should hit);
- ``paraphrase``: the same need in other words (word overlap misses these);
- ``near-miss``: a goal sharing many words with a lesson's goal but not its problem (no
  lesson applies: a retrieved one is a false positive).

Precision: retrieved lessons that are the labelled one, over all retrieved. Recall: goals
with a labelled lesson whose lesson was retrieved, over those goals. The search is
:meth:`LessonStore.search` itself, with the thresholds a supervisor of that backend uses.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from planloop.config.settings import Settings
from planloop.core.lessons import LessonStore, NewLesson, Query
from planloop.core.record import make_engine
from planloop.planner.embedding import Embedder
from planloop.supervisor.session.lessons import thresholds_for


@dataclass(frozen=True)
class CorpusLesson:
    key: str
    goal: str
    lesson: str


@dataclass(frozen=True)
class LabelledGoal:
    text: str
    kind: str  # "close", "paraphrase" or "near-miss"
    lesson: str | None  # the key of the lesson that applies; None: none does


LESSONS = (
    CorpusLesson(
        "restock",
        "Restock SKU-104 of category garden from the primary supplier",
        "The primary supplier is often out when restocking; check alternative suppliers.",
    ),
    CorpusLesson(
        "forecast",
        "Forecast next month's demand for SKU-220 in kitchen",
        "A short sales window misleads demand forecasts; read order_stats over 90 days.",
    ),
    CorpusLesson(
        "stock",
        "Check how many units of SKU-318 are in stock in the toys warehouse",
        "The shop's inventory figure lags the warehouse; read stock from the ERP.",
    ),
    CorpusLesson(
        "pricing",
        "Set a competitive price for SKU-411 against other shops",
        "Competitor prices change daily; read ecommerce.competitors on the day you price.",
    ),
    CorpusLesson(
        "approval",
        "Place a purchase order over 10000 EUR for SKU-512",
        "Orders above 10000 EUR need a manager's approval first (supply_chain.request_approval).",
    ),
    CorpusLesson(
        "reviews",
        "Summarize the customer reviews of SKU-613",
        "Review counts under 20 are noise; say how many reviews a summary rests on.",
    ),
)

GOALS = (
    # close wordings
    LabelledGoal(
        "Restock SKU-777 of category outdoor from the primary supplier", "close", "restock"
    ),
    LabelledGoal("Forecast next month's demand for SKU-031 in office", "close", "forecast"),
    LabelledGoal(
        "Check how many units of SKU-902 are in stock in the garden warehouse", "close", "stock"
    ),
    LabelledGoal("Set a competitive price for SKU-118 against other shops", "close", "pricing"),
    LabelledGoal("Place a purchase order over 10000 EUR for SKU-640", "close", "approval"),
    LabelledGoal("Summarize the customer reviews of SKU-250", "close", "reviews"),
    # paraphrases: the same need, hardly a word in common
    LabelledGoal(
        "Reorder SKU-777 from our usual vendor, it is running low", "paraphrase", "restock"
    ),
    LabelledGoal(
        "Replenish inventory of item SKU-45 through the main vendor", "paraphrase", "restock"
    ),
    LabelledGoal(
        "Predict how many SKU-031 units customers will buy over the coming weeks",
        "paraphrase",
        "forecast",
    ),
    LabelledGoal("Estimate future sales volume of SKU-88 for planning", "paraphrase", "forecast"),
    LabelledGoal(
        "What quantity of SKU-902 is physically on our shelves right now?", "paraphrase", "stock"
    ),
    LabelledGoal(
        "Decide what to charge for SKU-118 given what rival stores ask", "paraphrase", "pricing"
    ),
    LabelledGoal(
        "Buy goods worth twelve thousand euros of SKU-640 from a vendor", "paraphrase", "approval"
    ),
    LabelledGoal(
        "What do buyers think of SKU-250? Give me the gist of their feedback",
        "paraphrase",
        "reviews",
    ),
    # near misses: many shared words, another problem
    LabelledGoal("Restock the break room of the primary school with coffee", "near-miss", None),
    LabelledGoal(
        "Check how many units of SKU-318 were returned by customers last month", "near-miss", None
    ),
    LabelledGoal("Forecast the weather for next month's garden party", "near-miss", None),
    LabelledGoal(
        "Set a reminder to call the primary supplier about the invoice", "near-miss", None
    ),
    LabelledGoal("Cancel the purchase order for SKU-512", "near-miss", None),
    LabelledGoal("Summarize the sales meeting notes of the kitchen team", "near-miss", None),
)


@dataclass
class Quality:
    retrieved: int = 0
    relevant: int = 0
    wanted: int = 0
    hits: int = 0
    false_positives: int = 0  # lessons retrieved for a near-miss goal
    by_kind: dict[str, tuple[int, int]] | None = None  # kind -> (hits, goals)

    @property
    def precision(self) -> float:
        return self.relevant / self.retrieved if self.retrieved else 1.0

    @property
    def recall(self) -> float:
        return self.hits / self.wanted if self.wanted else 1.0


def measure(embedder: Embedder, settings: Settings) -> Quality:
    """Store :data:`LESSONS` with ``embedder``'s vectors, search every labelled goal."""
    limits = thresholds_for(settings, embedder)
    with tempfile.TemporaryDirectory() as tmp:
        store = LessonStore(make_engine(f"sqlite:///{Path(tmp) / 'retrieval.db'}"))
        ids = _store(store, embedder)
        quality = _search(store, embedder, ids, limits, settings.lessons_top_k)
        store.engine.dispose()
    return quality


def _store(store: LessonStore, embedder: Embedder) -> dict[int, str]:
    vectors = embedder.embed([t for c in LESSONS for t in (c.goal, c.lesson)])
    ids = {}
    for n, c in enumerate(LESSONS):
        key, text = (vectors[2 * n], vectors[2 * n + 1]) if vectors else ([], [])
        new = NewLesson(
            lesson=c.lesson,
            goal=c.goal,
            embedding=tuple(key),
            text_embedding=tuple(text),
            embedding_model=embedder.model if vectors else "",
        )
        lesson_id, merged = store.add(new, duplicate_similarity=0.99)
        assert not merged, f"corpus lesson {c.key} merged into another"
        ids[lesson_id] = c.key
    return ids


def _search(
    store: LessonStore,
    embedder: Embedder,
    ids: dict[int, str],
    limits: object,
    top_k: int,
) -> Quality:
    vectors = embedder.embed([g.text for g in GOALS])
    quality = Quality(by_kind={})
    assert quality.by_kind is not None
    for n, goal in enumerate(GOALS):
        query = Query(
            goal=goal.text,
            toolsets=(),
            embedding=tuple(vectors[n]) if vectors else (),
            embedding_model=embedder.model if vectors else "",
        )
        found = store.search(query, top_k=top_k, thresholds=limits)  # type: ignore[arg-type]
        keys = [ids[f.id] for f in found]
        quality.retrieved += len(keys)
        quality.relevant += sum(k == goal.lesson for k in keys)
        hit = goal.lesson is not None and goal.lesson in keys
        if goal.lesson is not None:
            quality.wanted += 1
            quality.hits += hit
        else:
            quality.false_positives += len(keys)
        hits, total = quality.by_kind.get(goal.kind, (0, 0))
        quality.by_kind[goal.kind] = (hits + (hit or (goal.lesson is None and not keys)), total + 1)
    return quality


def table_rows(results: Sequence[tuple[str, str, Quality | None]]) -> list[list[str]]:
    """Rows of the printed table: backend, what it is, precision, recall, per kind."""
    rows = []
    for name, what, q in results:
        if q is None:
            rows.append([name, what, "-", "-", "-", "-", "-"])
            continue
        kinds = q.by_kind or {}
        rows.append(
            [
                name,
                what,
                f"{q.precision:.2f}",
                f"{q.recall:.2f}",
                *(f"{kinds.get(k, (0, 0))[0]}/{kinds.get(k, (0, 0))[1]}" for k in _KINDS),
            ]
        )
    return rows


_KINDS = ("close", "paraphrase", "near-miss")
TABLE_COLUMNS = [
    "backend",
    "embeddings",
    "precision",
    "recall",
    "close found",
    "paraphrase found",
    "near-miss left out",
]
