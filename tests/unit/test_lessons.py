"""Lessons: similarity, sanitizing, the store's search, curation and measured effect.

The store runs on a SQLite file (the same SQL as production's default); vectors come from
the scripted server's hashed bag of words, computed in-process (no network).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.lessons import Found, LessonStore, NewLesson, Query, Thresholds, toolsets_of
from planloop.core.record import make_engine
from planloop.core.similarity import cosine, cosine_many, lexical_similarity
from planloop.planner.llm import Role, Usage
from planloop.planner.reflection import OUTPUT_MARK, Reflector, SessionStory, sanitize_lesson
from planloop.supervisor.session.lessons import (
    ADVICE_PREFIX,
    Ended,
    LessonMemory,
    advice,
    known_values,
)
from tests.llm_server import hashed_embedding

T = TypeVar("T", bound=BaseModel)
LIMITS = Thresholds(cosine=0.75, lexical=0.5)
SUPPLY = ("supply_chain",)
RESTOCK = "Restock SKU-1 of category garden from the primary supplier"
RESTOCK_2 = "Restock SKU-7 of category garden from the primary supplier"
UNRELATED = "Summarize last month's product reviews and competitor prices"
ADVICE = "The primary supplier is often out for garden SKUs; verify an alternative in parallel."


class FakeEmbedder:
    """The scripted server's vectors, in-process."""

    model = "hashed"

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Any) -> list[list[float]] | None:
        self.calls += 1
        return [hashed_embedding(t) for t in texts]


class NoVectors:
    model = ""

    def embed(self, texts: Any) -> list[list[float]] | None:
        return None


class ReflectorChat:
    """Answers the reflector role with fixed lessons; records the prompts."""

    def __init__(self, lessons: list[dict[str, Any]]) -> None:
        self.lessons = lessons
        self.prompts: list[str] = []

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        assert role == Role.REFLECTOR
        self.prompts.append("\n".join(m["content"] for m in messages))
        return schema.model_validate({"lessons": self.lessons}), Usage(10, 5, 0.0, "m", "reflector")


@pytest.fixture
def store(tmp_path: Path) -> LessonStore:
    return LessonStore(make_engine(f"sqlite:///{tmp_path / 'lessons.db'}"))


def vec(text: str) -> tuple[float, ...]:
    return tuple(hashed_embedding(text))


def lesson(text: str = ADVICE, goal: str = RESTOCK, **kw: Any) -> NewLesson:
    values: dict[str, Any] = {
        "lesson": text,
        "goal": goal,
        "toolsets": SUPPLY,
        "embedding": vec(goal),
        "text_embedding": vec(text),
        "embedding_model": "hashed",
        "source_session": "s0",
    }
    values.update(kw)
    return NewLesson(**values)


def query(goal: str, toolsets: tuple[str, ...] = SUPPLY, vectors: bool = True) -> Query:
    if not vectors:
        return Query(goal, toolsets)
    return Query(goal, toolsets, vec(goal), "hashed")


# --- similarity -----------------------------------------------------------------------------


def test_similar_goals_score_high_and_unrelated_ones_low() -> None:
    assert cosine(vec(RESTOCK), vec(RESTOCK_2)) >= 0.75
    assert cosine(vec(RESTOCK), vec(UNRELATED)) < 0.3
    assert lexical_similarity(RESTOCK, RESTOCK_2) >= 0.5
    assert lexical_similarity(RESTOCK, UNRELATED) < 0.2
    assert lexical_similarity("", RESTOCK) == 0.0
    assert cosine_many(vec(RESTOCK), [vec(RESTOCK), (1.0,), vec(UNRELATED)])[:2] == [
        pytest.approx(1.0),
        0.0,
    ]


def test_toolsets_are_the_prefixes_of_tool_names() -> None:
    assert toolsets_of(["supply_chain.erp_stock", "ecommerce.reviews", "bench.sleep"]) == (
        "bench",
        "ecommerce",
        "supply_chain",
    )


# --- sanitizing -----------------------------------------------------------------------------


def test_a_lesson_never_keeps_secrets_tool_outputs_or_secret_pairs() -> None:
    secret = "zq0123456789abcdef"
    output = "supplier ACME-42 has 0 units left in warehouse 7"
    text = (
        f"use token {secret} again; the tool said {output}; api_key=sk-live-123 "
        '<data>{"raw": 1}</data> then verify an alternative'
    )
    clean = sanitize_lesson(text, secrets={secret}, outputs={output})
    assert secret not in clean
    assert output not in clean
    assert "sk-live-123" not in clean
    assert '"raw"' not in clean
    assert OUTPUT_MARK in clean
    assert "verify an alternative" in clean
    assert len(sanitize_lesson("x" * 5000)) == 600


def test_known_values_finds_secret_params_and_output_strings() -> None:
    secrets, outputs = known_values(
        [{"sku": "SKU-1", "password": "pw-1", "cfg": {"api_key": "k-1"}}],
        [{"note": "a long output string here", "token": "t-1", "n": 3}],
        sensitive={"sku"},
    )
    assert secrets == {"SKU-1", "pw-1", "k-1", "t-1"}
    assert outputs == {"a long output string here"}


def test_the_reflector_is_told_no_secret_and_stores_no_secret() -> None:
    secret = "zqsecretvalue000111"
    chat = ReflectorChat(
        [
            {
                "trigger": f"verify_supplier failed with key {secret}",
                "lesson": f"verify an alternative supplier in parallel; never reuse {secret}",
                "applies_to": {"toolsets": ["supply_chain", " "], "tools": []},
                "evidence": "the step failed",
            }
        ]
        * 5
    )
    story = SessionStory(
        goal=RESTOCK,
        outcome=f"failed: password={secret}",
        what_happened=[f"TASK_FAILED verify: token {secret}"],
        steps=["verify (supply_chain.verify_supplier): failed"],
    )
    drafts, _ = Reflector(chat, max_lessons=2).reflect(story, secrets={secret})
    assert len(drafts) == 2
    assert secret not in chat.prompts[0]
    assert all(secret not in d.model_dump_json() for d in drafts)
    assert drafts[0].applies_to.toolsets == ["supply_chain"]


# --- the store ------------------------------------------------------------------------------


def test_search_finds_a_similar_goal_within_its_toolsets_and_not_a_dissimilar_one(
    store: LessonStore,
) -> None:
    lesson_id, merged = store.add(lesson())
    assert not merged
    found = store.search(query(RESTOCK_2), top_k=3, thresholds=LIMITS)
    assert [(f.id, f.via) for f in found] == [(lesson_id, "cosine")]
    assert found[0].similarity >= 0.75
    assert store.search(query(UNRELATED), top_k=3, thresholds=LIMITS) == []
    assert store.search(query(RESTOCK_2, ("ecommerce",)), top_k=3, thresholds=LIMITS) == []
    assert store.search(query(RESTOCK_2), top_k=0, thresholds=LIMITS) == []


def test_without_vectors_the_search_is_lexical(store: LessonStore) -> None:
    lesson_id, _ = store.add(lesson(embedding=(), text_embedding=(), embedding_model=""))
    found = store.search(query(RESTOCK_2, vectors=False), top_k=3, thresholds=LIMITS)
    assert [(f.id, f.via) for f in found] == [(lesson_id, "lexical")]
    assert store.search(query(UNRELATED, vectors=False), top_k=3, thresholds=LIMITS) == []


def test_top_k_keeps_the_most_similar(store: LessonStore) -> None:
    goals = [RESTOCK, RESTOCK + " today", RESTOCK_2, RESTOCK + " now please quickly"]
    ids = [store.add(lesson(f"lesson number {n} " * (n + 1), g))[0] for n, g in enumerate(goals)]
    found = store.search(query(RESTOCK), top_k=2, thresholds=LIMITS)
    assert len(found) == 2
    assert found[0].id == ids[0]
    assert found[0].similarity >= found[1].similarity


def test_a_near_duplicate_is_merged_and_the_store_is_bounded(store: LessonStore) -> None:
    first, _ = store.add(lesson(evidence="session one"))
    again, merged = store.add(lesson(evidence="session two", toolsets=("ecommerce",)))
    assert (again, merged) == (first, True)
    row = store.get(first)
    assert row is not None
    assert row.merged == 1
    assert "session two" in row.evidence
    assert "ecommerce" in row.toolsets
    other, _ = store.add(lesson("Reviews are slow; fetch them first.", UNRELATED))
    store.disable(other)
    third, _ = store.add(lesson("Competitor prices lag a day; say so.", UNRELATED), max_lessons=2)
    assert store.get(other) is None  # disabled: the least useful, evicted first
    assert {r.id for r in store.all()} == {first, third}


def test_disable_and_delete_take_a_lesson_out_of_search(store: LessonStore) -> None:
    lesson_id, _ = store.add(lesson())
    assert store.disable(lesson_id, "wrong")
    assert store.search(query(RESTOCK), top_k=3, thresholds=LIMITS) == []
    assert store.enable(lesson_id)
    assert store.search(query(RESTOCK), top_k=3, thresholds=LIMITS) != []
    assert store.delete(lesson_id)
    assert store.get(lesson_id) is None
    assert not store.delete(lesson_id)
    assert not store.disable(lesson_id)


def test_uses_carry_the_outcome_and_a_lesson_that_hurts_is_disabled(store: LessonStore) -> None:
    lesson_id, _ = store.add(lesson())
    # five similar sessions without the lesson (searched before it existed... or elsewhere):
    for n in range(5):
        store.record_search(f"w{n}", query(RESTOCK_2), [])
        store.finish(f"w{n}", "completed", replans=0)
    hit = Found(lesson_id, ADVICE, "", 0.9, "cosine")
    for n in range(4):
        store.record_search(f"u{n}", query(RESTOCK_2), [hit])
        assert store.finish(f"u{n}", "failed", replans=1) == [lesson_id]
    store.record_search("far", query(UNRELATED), [])
    store.finish("far", "failed")
    (stats,) = store.stats()
    assert (stats.used, stats.used_ok, stats.without, stats.without_ok) == (4, 0, 5, 5)
    assert stats.replans_used == 1.0
    assert stats.replans_without == 0.0
    assert store.auto_disable([lesson_id], min_uses=5, thresholds=LIMITS) == []  # 4 < 5
    store.record_search("u4", query(RESTOCK_2), [hit])
    store.finish("u4", "failed")
    (disabled,) = store.auto_disable([lesson_id], min_uses=5, thresholds=LIMITS)
    row = store.get(lesson_id)
    assert row is not None
    assert not row.enabled
    assert row.disabled_reason.startswith("auto: sessions with it succeeded 0/5")
    assert disabled.rate_without == 1.0


def test_a_use_is_recorded_once_per_session(store: LessonStore) -> None:
    lesson_id, _ = store.add(lesson())
    hit = Found(lesson_id, ADVICE, "", 0.9, "cosine")
    store.record_search("s1", query(RESTOCK), [hit])
    store.record_search("s1", query(RESTOCK), [hit])
    row = store.get(lesson_id)
    assert row is not None
    assert row.uses == 1
    assert store.used_by("s1") == [lesson_id]


# --- the memory: retrieval into prompts, reflection at the end -------------------------------


def memory(store: LessonStore, chat: Any, embedder: Any = None) -> LessonMemory:
    return LessonMemory(Settings(), store, embedder or FakeEmbedder(), chat)


def ended(sid: str, status: str = "failed", replans: int = 0) -> Ended:
    from planloop.core.models import SessionStatus

    story = SessionStory(RESTOCK, status, [], ["verify (supply_chain.verify_supplier): failed"])
    return Ended(sid, SessionStatus(status), replans, False, story)


def test_a_failed_session_leaves_a_lesson_the_next_similar_goal_gets(store: LessonStore) -> None:
    chat = ReflectorChat([{"lesson": ADVICE, "applies_to": {"toolsets": ["supply_chain"]}}])
    mem = memory(store, chat)
    assert mem.retrieve("s1", RESTOCK, ["supply_chain.verify_supplier"]) == []
    written, usages = mem.conclude(ended("s1"), RESTOCK)
    assert len(written) == 1
    assert len(usages) == 1
    found = mem.retrieve("s2", RESTOCK_2, ["supply_chain.verify_supplier"])
    assert [f.id for f in found] == written
    (line,) = advice(found)
    assert line.startswith(ADVICE_PREFIX)
    assert ADVICE in line
    assert mem.retrieve("s3", UNRELATED, ["supply_chain.verify_supplier"]) == []


def test_a_completed_session_without_replans_is_not_reflected_on(store: LessonStore) -> None:
    chat = ReflectorChat([{"lesson": ADVICE}])
    assert memory(store, chat).conclude(ended("s1", "completed"), RESTOCK) == ([], [])
    assert chat.prompts == []
    assert memory(store, chat).conclude(ended("s2", "completed", 1), RESTOCK)[0] != []


def test_lessons_work_lexically_without_embeddings(store: LessonStore) -> None:
    chat = ReflectorChat([{"lesson": ADVICE, "applies_to": {"toolsets": ["supply_chain"]}}])
    mem = memory(store, chat, NoVectors())
    mem.conclude(ended("s1"), RESTOCK)
    (found,) = mem.retrieve("s2", RESTOCK_2, ["supply_chain.erp_stock"])
    assert found.via == "lexical"
    assert mem.retrieve("s3", UNRELATED, ["supply_chain.erp_stock"]) == []


def test_a_merge_moves_the_key_towards_every_source_goal(store: LessonStore) -> None:
    first, _ = store.add(lesson())
    before = store.get(first)
    assert before is not None
    store.add(lesson(goal=RESTOCK_2, embedding=vec(RESTOCK_2)))
    after = store.get(first)
    assert after is not None
    assert after.embedding != before.embedding
    key = [float(v) for v in after.embedding.strip("[]").split(",")]
    assert cosine(key, vec(RESTOCK_2)) > cosine(vec(RESTOCK), vec(RESTOCK_2))


def test_a_goal_is_stored_masked(store: LessonStore) -> None:
    chat = ReflectorChat([{"lesson": ADVICE}])
    mem = memory(store, chat)
    goal = f"{RESTOCK} with api_key=sk-goal-123"
    mem.retrieve("s1", goal, ["supply_chain.erp_stock"])
    (written,), _ = mem.conclude(ended("s1"), goal)
    row = store.get(written)
    assert row is not None
    assert "sk-goal-123" not in row.goal
    assert RESTOCK in row.goal


def test_a_lesson_that_hurts_is_disabled_at_a_sessions_end_and_logged(
    store: LessonStore, caplog: pytest.LogCaptureFixture
) -> None:
    chat = ReflectorChat([])  # reflections write nothing new here
    mem = LessonMemory(Settings(lessons_auto_disable_min_uses=2), store, FakeEmbedder(), chat)
    lesson_id, _ = store.add(lesson())
    store.disable(lesson_id)  # hidden while the comparison group ends well
    for sid in ("w1", "w2"):
        mem.retrieve(sid, RESTOCK_2, ["supply_chain.erp_stock"])
        mem.conclude(ended(sid, "completed"), RESTOCK_2)
    store.enable(lesson_id)
    for sid in ("u1", "u2"):
        assert [f.id for f in mem.retrieve(sid, RESTOCK_2, ["supply_chain.erp_stock"])] == [
            lesson_id
        ]
        with caplog.at_level("WARNING", logger="planloop.core.lessons"):
            mem.conclude(ended(sid, "failed"), RESTOCK_2)
    row = store.get(lesson_id)
    assert row is not None
    assert not row.enabled
    assert "0/2" in row.disabled_reason
    assert "2/2" in row.disabled_reason
    assert f"lesson {lesson_id} disabled automatically" in caplog.text
