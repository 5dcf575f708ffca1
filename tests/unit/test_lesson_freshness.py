"""Lessons that hold up: tool versions, age, toolset scope, and seeded lessons.

Pure functions first (core/lesson_freshness.py), then the store's search on a SQLite file
leaving stale lessons out, then the checks of a lesson seeded by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planloop.config.settings import Settings
from planloop.core.lesson_freshness import (
    DAY_S,
    in_scope,
    served_versions,
    stale_reason,
    tool_version,
    versions_for,
)
from planloop.core.lessons import LessonStore, NewLesson, Query, Thresholds
from planloop.core.record import make_engine
from planloop.core.tools import load_tools
from planloop.producer.lesson_add import BadLessonError, parse_seeded, read_lesson_file
from planloop.supervisor.session.lessons import LessonMemory

NOW = 1_800_000_000.0
SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
GOAL = "Restock SKU-1 of category garden from the primary supplier"
LIMITS = Thresholds(cosine=0.75, lexical=0.5)


# --- versions --------------------------------------------------------------------------------
def test_a_tool_version_is_the_same_for_the_same_schema_in_any_key_order() -> None:
    reordered = {"required": ["sku"], "properties": {"sku": {"type": "string"}}, "type": "object"}
    assert tool_version(SCHEMA) == tool_version(reordered)
    assert tool_version(SCHEMA).startswith("schema:")


def test_a_changed_params_schema_is_a_new_version() -> None:
    wider = {**SCHEMA, "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}
    assert tool_version(SCHEMA) != tool_version(wider)


def test_the_bundled_tools_each_have_a_version() -> None:
    served = served_versions(load_tools().specs())
    assert "ecommerce.inventory" in served
    assert all(v.startswith("schema:") for v in served.values())


def test_a_lesson_is_learned_on_the_served_tools_of_its_toolsets() -> None:
    served = {"ecommerce.inventory": "a", "supply_chain.erp_stock": "b", "bench.sleep": "c"}
    assert versions_for(served, ["supply_chain"]) == {"supply_chain.erp_stock": "b"}
    assert versions_for(served, []) == served  # no toolsets: everything it could touch


# --- staleness -------------------------------------------------------------------------------
def test_a_lesson_on_the_served_versions_and_young_enough_is_fresh() -> None:
    learned = {"ecommerce.inventory": "a"}
    assert stale_reason(learned, learned, created_at=NOW - DAY_S, now=NOW, max_age_days=90) is None


def test_a_lesson_whose_tool_changed_is_stale_and_names_the_tool() -> None:
    reason = stale_reason(
        {"ecommerce.inventory": "a", "ecommerce.reviews": "r"},
        {"ecommerce.inventory": "a2", "ecommerce.reviews": "r"},
        created_at=NOW,
        now=NOW,
        max_age_days=90,
    )
    assert reason is not None
    assert "ecommerce.inventory" in reason
    assert "ecommerce.reviews" not in reason


def test_a_tool_no_longer_served_makes_no_lesson_stale() -> None:
    learned = {"ecommerce.inventory": "a"}
    assert stale_reason(learned, {}, created_at=NOW, now=NOW, max_age_days=90) is None


def test_a_lesson_older_than_the_limit_is_stale_and_zero_turns_ageing_off() -> None:
    old = NOW - 91 * DAY_S
    reason = stale_reason({}, {}, created_at=old, now=NOW, max_age_days=90)
    assert reason is not None
    assert "90 days" in reason
    assert stale_reason({}, {}, created_at=NOW - 89 * DAY_S, now=NOW, max_age_days=90) is None
    assert stale_reason({}, {}, created_at=old, now=NOW, max_age_days=0) is None


# --- scope -----------------------------------------------------------------------------------
def test_a_scoped_lesson_applies_only_to_sessions_using_one_of_its_toolsets() -> None:
    assert in_scope(["ecommerce", "supply_chain"], ["supply_chain"])
    assert not in_scope(["ecommerce"], ["supply_chain", "bench"])
    assert in_scope([], ["bench"])  # a lesson without toolsets applies anywhere


# --- the store leaves stale lessons out ------------------------------------------------------
@pytest.fixture
def store(tmp_path: Path) -> LessonStore:
    return LessonStore(make_engine(f"sqlite:///{tmp_path / 'lessons.db'}"))


def _add(store: LessonStore, versions: dict[str, str], toolsets: tuple[str, ...]) -> int:
    new = NewLesson(lesson="Check the ERP first.", goal=GOAL, toolsets=toolsets)
    return store.add(NewLesson(**{**new.__dict__, "tool_versions": versions}))[0]


def test_search_leaves_out_a_lesson_whose_tool_changed(store: LessonStore) -> None:
    lesson_id = _add(store, {"supply_chain.erp_stock": "v1"}, ("supply_chain",))
    query = Query(GOAL, ("supply_chain",), served={"supply_chain.erp_stock": "v1"})
    assert [f.id for f in store.search(query, top_k=3, thresholds=LIMITS)] == [lesson_id]
    moved = Query(GOAL, ("supply_chain",), served={"supply_chain.erp_stock": "v2"})
    assert store.search(moved, top_k=3, thresholds=LIMITS) == []


def test_search_leaves_out_a_lesson_past_the_age_limit(store: LessonStore) -> None:
    _add(store, {}, ("supply_chain",))
    later = Query(GOAL, ("supply_chain",), max_age_days=90, now=NOW + 10**9)
    assert store.search(later, top_k=3, thresholds=LIMITS) == []


def test_search_leaves_out_a_lesson_of_another_toolset(store: LessonStore) -> None:
    _add(store, {}, ("ecommerce",))
    assert store.search(Query(GOAL, ("supply_chain",)), top_k=3, thresholds=LIMITS) == []
    assert len(store.search(Query(GOAL, ("ecommerce",)), top_k=3, thresholds=LIMITS)) == 1


def test_a_reflected_lesson_is_stored_with_the_versions_of_its_tools(store: LessonStore) -> None:
    from planloop.planner.reflection import AppliesTo, LessonDraft

    memory = LessonMemory(Settings(), store, _NoVectors(), None)
    served = {"supply_chain.erp_stock": "v1", "supply_chain.reserve_stock": "v9"}
    by_tool = LessonDraft(
        lesson="Reserve less.", applies_to=AppliesTo(tools=["supply_chain.reserve_stock"])
    )
    by_set = LessonDraft(
        lesson="Check ERP stock first.", applies_to=AppliesTo(toolsets=["supply_chain"])
    )
    first, second = memory.store_drafts("s1", GOAL, [by_tool, by_set], served)
    rows = {r.id: r for r in store.all()}
    assert rows[first].tool_versions == '{"supply_chain.reserve_stock":"v9"}'
    assert rows[second].tool_versions == (
        '{"supply_chain.erp_stock":"v1","supply_chain.reserve_stock":"v9"}'
    )


class _NoVectors:
    model = ""

    def embed(self, texts: object) -> None:
        return None


# --- a lesson seeded by hand -----------------------------------------------------------------
def test_a_seeded_lesson_reads_as_the_reflexion_triple() -> None:
    seeded = parse_seeded(
        {
            "goal_pattern": "restock garden SKUs",
            "root_cause": "the primary supplier is often out",
            "avoidance": "reserving before verifying the supplier",
            "suggestion": "verify an alternative supplier in parallel.",
            "toolsets": ["supply_chain", "supply_chain"],
        }
    )
    assert seeded.toolsets == ["supply_chain"]
    assert seeded.text() == (
        "Root cause: the primary supplier is often out. "
        "Avoid: reserving before verifying the supplier. "
        "Suggestion: verify an alternative supplier in parallel."
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"avoidance": "x"}, "goal_pattern"),
        ({"goal_pattern": "g", "root_cause": "only why"}, "--avoidance or --suggestion"),
        ({"goal_pattern": "g", "suggestion": "a\x00b"}, "control character"),
        ({"goal_pattern": "g", "suggestion": "x" * 301}, "suggestion"),
        ({"goal_pattern": "g", "suggestion": "s", "toolsets": ["eco merce"]}, "toolset name"),
        ({"goal_pattern": "g", "suggestion": "s", "colour": "red"}, "colour"),
        (
            {"goal_pattern": "g", "root_cause": "r" * 300, "avoidance": "a" * 300},
            "above 600",
        ),
    ],
)
def test_a_bad_seeded_lesson_is_refused_in_one_line(fields: dict[str, object], says: str) -> None:
    with pytest.raises(BadLessonError) as caught:
        parse_seeded(fields)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_lesson_file_takes_a_comma_list_of_toolsets(tmp_path: Path) -> None:
    path = tmp_path / "lesson.yaml"
    path.write_text("goal-pattern: restock\nsuggestion: verify first\ntoolsets: a, b\n")
    fields = read_lesson_file(path, Settings())
    assert fields == {
        "goal_pattern": "restock",
        "suggestion": "verify first",
        "toolsets": ["a", "b"],
    }
    path.write_text("- not a mapping\n")
    with pytest.raises(BadLessonError, match="mapping"):
        read_lesson_file(path, Settings())
