"""bench/lessons.py's parts that need no stack: its goals, its twin model, its corpus."""

from __future__ import annotations

from collections.abc import Sequence

from bench.lessons_retrieval import GOALS, LESSONS, measure, table_rows
from bench.lessons_twin import RESTOCK, RESTOCK_SKUS, TwinServer, goals, lessons_section
from planloop.config.settings import Settings
from planloop.planner.embedding import NoEmbedder
from planloop.workers.toolsets._data import supplier_quote
from tests.llm_server import hashed_embedding


class HashedEmbedder:
    """The scripted server's embeddings, in-process."""

    model = "hashed-bow"

    def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        return [hashed_embedding(t) for t in texts]


def test_goals_are_seeded_and_their_primary_supplier_really_is_out() -> None:
    assert goals(30, 3) == goals(30, 3)
    assert {g.family.pitfall for g in goals(9, 3)} == {True, False}
    assert RESTOCK_SKUS
    assert not any(supplier_quote(sku, "primary")[0] for sku in RESTOCK_SKUS)


def test_the_lessons_section_is_read_up_to_the_next_heading() -> None:
    prompt = "## Goal\nx\n## Lessons from earlier sessions (advice)\n- check it\n## Tools\nt"
    assert lessons_section(prompt).strip() == "- check it"
    assert lessons_section("## Goal\nno lessons here") == ""


def test_the_twin_repeats_its_mistake_unless_a_lesson_or_a_draw_says_otherwise() -> None:
    twin = TwinServer()
    goal = next(g for g in goals(12, 1) if g.family is RESTOCK)
    told = f"{goal.text}\n## Lessons from earlier sessions\n- {RESTOCK.lesson}\n## Tools\n"
    untold = f"{goal.text}\n## Lessons from earlier sessions\n(none)\n## Tools\n"
    planned = twin._twin("planner", told, goal)
    assert planned is not None
    assert planned["steps"][0]["tool"] == "supply_chain.alternative_suppliers"
    planned = twin._twin("planner", untold, goal)
    assert planned is not None
    assert planned["steps"][0]["tool"] == "supply_chain.verify_supplier"
    stubborn = goal.__class__(goal.family, goal.text, goal.sku, draw=0.99)
    replanned = twin._twin("replanner", untold, stubborn)
    assert replanned is not None
    assert replanned["steps"][0]["tool"] == "supply_chain.verify_supplier"
    reflected = twin._twin("reflector", f"{goal.text} supply_chain.verify_supplier failed", goal)
    assert reflected is not None
    (lesson,) = reflected["lessons"]
    assert RESTOCK.marker in lesson["lesson"]


def test_the_corpus_is_labelled_with_every_kind() -> None:
    keys = {c.key for c in LESSONS}
    assert {g.lesson for g in GOALS if g.lesson is not None} <= keys
    assert {g.kind for g in GOALS} == {"close", "paraphrase", "near-miss"}


def test_word_overlap_finds_close_wordings_and_misses_paraphrases() -> None:
    settings = Settings()
    lexical = measure(NoEmbedder(), settings)
    hashed = measure(HashedEmbedder(), settings)
    for quality in (lexical, hashed):
        assert quality.by_kind is not None
        assert quality.by_kind["paraphrase"][0] == 0  # what embeddings of meaning are for
        assert quality.by_kind["close"][0] >= 5
        assert 0.0 <= quality.precision <= 1.0
    (row,) = table_rows([("lexical", "none", lexical)])
    assert row[:2] == ["lexical", "none"]
    assert table_rows([("local", "not installed", None)])[0][2] == "-"
