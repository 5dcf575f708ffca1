"""Lessons end to end: a failure teaches, the next similar goal is told.

Real Redis, a real worker and supervisor, the scripted OpenAI-compatible server over HTTP
(chat by role, ``/v1/embeddings`` as hashed bags of words), the SQL record on SQLite; the
pgvector search on PostgreSQL where the ``vector`` extension exists.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from planloop.config.settings import Settings
from planloop.core.lessons import LessonStore, NewLesson, Query, Thresholds
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.record import SqlRecord, make_engine
from planloop.planner.embedding import OpenAIEmbedder
from planloop.producer.cli import cli
from planloop.producer.client import Producer
from planloop.supervisor.session.lessons import ADVICE_PREFIX, LessonMemory
from tests.conftest import own_pg_database, wait_for
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_planning_loop import decision, echo, prompts, run, subgraph
from tests.integration.test_rounds import critique
from tests.llm_server import ScriptedLLMServer, hashed_embedding

pytestmark = pytest.mark.integration

FAILED_GOAL = "Restock SKU-1 of category garden from the primary supplier"
SIMILAR_GOAL = "Restock SKU-7 of category garden from the primary supplier"
OTHER_GOAL = "Summarize the product reviews of the spring catalogue"
LESSON = (
    "The primary supplier is often out for garden SKUs; verify an alternative supplier in parallel."
)


def plan(goal: str, *steps: dict[str, Any]) -> dict[str, Any]:
    return {"goal": goal, "steps": list(steps)}


def verify_primary(sku: str) -> dict[str, Any]:
    """A check of the primary supplier that fails for good."""
    return {
        "id": "verify",
        "tool": "supply_chain.verify_supplier",
        "params": {
            "sku": sku,
            "supplier_id": "primary",
            "simulate": {"fail_attempts": [1], "permanent": True},
        },
        "max_retries": 0,
        "critical": True,
    }


def goal_session(
    producer: Producer, record: SqlRecord, goal: str, mode: str = "plan"
) -> tuple[str, Any]:
    sid = producer.submit_goal(goal, options=SessionOptions(mode=mode))  # type: ignore[arg-type]
    return sid, wait_recorded(producer, record, sid)


def lessons_cli(settings: Settings, *args: str) -> Any:
    env = {"PLANLOOP_DATABASE_URL": settings.database_url}
    return CliRunner().invoke(cli, ["lessons", *args], env=env, catch_exceptions=False)


def test_a_failure_teaches_the_next_similar_goal_and_never_a_dissimilar_one(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    lessons: LessonStore,
) -> None:
    secret = f"zq{uuid.uuid4().hex}"
    memo = f"warehouse memo {uuid.uuid4().hex[:12]} for the garden aisle"
    # 1. A session fails on the primary supplier; the reflector echoes a secret, a tool
    #    output and a credential pair, none of which may be stored.
    note = echo("note", {"api_token": secret, "memo": memo})
    llm.script("planner", plan(FAILED_GOAL, note, verify_primary("SKU-1")))
    llm.script("decider", decision("ABORT", "the primary supplier cannot deliver"))
    llm.script(
        "reflector",
        {
            "lessons": [
                {
                    "trigger": f"verify_supplier failed on the primary supplier, token {secret}",
                    "lesson": f"{LESSON} Memo: {memo}",
                    "applies_to": {
                        "toolsets": ["supply_chain"],
                        "tools": ["supply_chain.verify_supplier"],
                    },
                    "evidence": "api_key=sk-live-999 and the verify step failed for good",
                }
            ]
        },
    )
    first, session = goal_session(llm_producer, llm_record, FAILED_GOAL)
    assert session.status in (SessionStatus.ABORTED, SessionStatus.FAILED), session.error
    (row,) = wait_for(lessons.all, 30, "the reflector's lesson")
    (reflector_prompt,) = prompts(llm, "reflector")
    assert FAILED_GOAL in reflector_prompt
    assert "verify" in reflector_prompt
    assert "injected failure" in reflector_prompt
    assert secret not in reflector_prompt
    assert memo not in reflector_prompt
    stored = json.dumps([row.trigger, row.lesson, row.evidence, row.goal])
    assert secret not in stored
    assert memo not in stored
    assert "sk-live-999" not in stored
    assert LESSON in row.lesson
    assert (row.source_session, json.loads(row.toolsets)) == (first, ["supply_chain"])
    assert row.embedding_model == llm_settings.llm_embedding_model
    assert FAILED_GOAL in llm.embedding_inputs

    # 2. A similar goal: the router's and the planner's prompts carry the lesson as advice.
    llm.script("router", {"mode": "plan", "reasoning": "known calls"})
    llm.script("planner", plan(SIMILAR_GOAL, echo("ok", "restocked")))
    second, session = goal_session(llm_producer, llm_record, SIMILAR_GOAL, mode="auto")
    assert session.status == SessionStatus.COMPLETED, session.error
    (planner_prompt,) = prompts(llm, "planner")[1:]
    (router_prompt,) = prompts(llm, "router")
    for prompt in (planner_prompt, router_prompt):
        assert f"{ADVICE_PREFIX} (lesson {row.id}" in prompt
        assert LESSON in prompt
    assert lessons.used_by(second) == [row.id]

    # 3. A dissimilar goal gets no lesson.
    llm.script("planner", plan(OTHER_GOAL, echo("ok", "summary")))
    third, session = goal_session(llm_producer, llm_record, OTHER_GOAL)
    assert session.status == SessionStatus.COMPLETED, session.error
    assert ADVICE_PREFIX not in prompts(llm, "planner")[2]
    assert lessons.used_by(third) == []

    # 4. `planloop lessons` shows the use and its outcome; the first session (without the
    #    lesson, similar goal) is the comparison.
    (doc,) = wait_for(lambda: _with_outcome(lessons_cli(llm_settings, "--json")), 10, "outcome")
    assert doc["id"] == row.id
    assert doc["with"] == {"sessions": 1, "succeeded": 1, "rate": 1.0}
    # The LLM stack's record is shared with other test modules on this xdist worker, and
    # their sessions may have similar goals: the first session (failed, no lesson) is among
    # the comparison's, whatever else is.
    assert doc["without"]["sessions"] >= 1
    assert doc["without"]["succeeded"] < doc["without"]["sessions"]
    shown = lessons_cli(llm_settings, "show", str(row.id))
    assert LESSON in shown.output
    assert "source_session: " + first in shown.output
    listed = lessons_cli(llm_settings)
    assert "1/1 (100%)" in listed.output

    # 5. Disabled, the lesson is no longer given; deleted, it is gone.
    assert lessons_cli(llm_settings, "disable", str(row.id)).exit_code == 0
    llm.script("planner", plan(SIMILAR_GOAL, echo("ok", "restocked")))
    _, session = goal_session(llm_producer, llm_record, SIMILAR_GOAL)
    assert session.status == SessionStatus.COMPLETED, session.error
    assert ADVICE_PREFIX not in prompts(llm, "planner")[3]
    assert lessons_cli(llm_settings, "delete", str(row.id)).exit_code == 0
    assert lessons.get(row.id) is None
    assert lessons_cli(llm_settings, "show", str(row.id)).exit_code == 2


def _with_outcome(result: Any) -> list[dict[str, Any]] | None:
    docs: list[dict[str, Any]] = json.loads(result.output)
    return docs if docs and docs[0]["with"]["sessions"] == 1 else None


def test_lessons_fall_back_to_lexical_similarity_without_an_embeddings_endpoint(
    tmp_path: Any,
) -> None:
    with ScriptedLLMServer(embeddings_ok=False) as srv:
        settings = Settings(
            llm_base_url=srv.base_url,
            llm_api_key="test",  # type: ignore[arg-type]
            llm_max_retries=0,
            database_url=f"sqlite:///{tmp_path / 'lexical.db'}",
        )
        embedder = OpenAIEmbedder(settings)
        memory = LessonMemory(
            settings, LessonStore(make_engine(settings.database_url)), embedder, None
        )
        (lesson_id,) = memory.store_drafts("s1", FAILED_GOAL, _drafts())
        assert not embedder.available  # the 404 was remembered
        row = memory.store.get(lesson_id)
        assert row is not None
        assert row.embedding == ""
        (found,) = memory.retrieve("s2", SIMILAR_GOAL, ["supply_chain.verify_supplier"])
        assert (found.id, found.via) == (lesson_id, "lexical")
        assert memory.retrieve("s3", OTHER_GOAL, ["supply_chain.verify_supplier"]) == []
        embedder.close()


def _drafts() -> list[Any]:
    from planloop.planner.reflection import AppliesTo, LessonDraft

    return [LessonDraft(lesson=LESSON, applies_to=AppliesTo(toolsets=["supply_chain"]))]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL database of this test's own (the shared one is left alone)."""
    with own_pg_database("planloop_lessons_") as url:
        yield url


@pytest.mark.postgres
def test_the_search_runs_in_postgresql_with_pgvector(pg_url: str) -> None:
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        has_vector = conn.execute(
            text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
    store = LessonStore(engine)
    lesson_id, _ = store.add(
        NewLesson(
            lesson=LESSON,
            goal=FAILED_GOAL,
            toolsets=("supply_chain",),
            embedding=tuple(hashed_embedding(FAILED_GOAL)),
            text_embedding=tuple(hashed_embedding(LESSON)),
            embedding_model="hashed",
        )
    )
    query = Query(SIMILAR_GOAL, ("supply_chain",), tuple(hashed_embedding(SIMILAR_GOAL)), "hashed")
    (found,) = store.search(query, top_k=3, thresholds=Thresholds())
    far = Query(OTHER_GOAL, ("supply_chain",), tuple(hashed_embedding(OTHER_GOAL)), "hashed")
    assert store.search(far, top_k=3, thresholds=Thresholds()) == []
    engine.dispose()
    if has_vector is None:
        # The Python search ran on PostgreSQL; the pgvector path needs the extension.
        assert (found.id, found.via, store.pgvector) == (lesson_id, "cosine", False)
        pytest.skip(
            "the PostgreSQL server has no 'vector' extension (pg_available_extensions): "
            "pgvector search not tested; install pgvector to run it"
        )
    assert (found.id, found.via, store.pgvector) == (lesson_id, "pgvector", True)
    assert found.similarity >= 0.75


def test_a_round_the_critic_did_not_pass_is_reflected_on_and_replanning_gets_lessons(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    lessons: LessonStore,
) -> None:
    embedder = OpenAIEmbedder(llm_settings)
    seeded = LessonMemory(llm_settings, lessons, embedder, None)
    (seed_id,) = seeded.store_drafts("earlier", FAILED_GOAL, _drafts())
    embedder.close()
    llm.script("critic", critique(False, "no alternative supplier was checked", "alternative"))
    llm.script("replanner", subgraph(echo("second", "two", "first")))
    critic_lesson = "When restocking garden SKUs, the critic expects an alternative supplier."
    llm.script("reflector", {"lessons": [{"lesson": critic_lesson}]})
    plan_file = f"""
goal: {SIMILAR_GOAL}
steps:
  - {{id: first, tool: bench.echo, params: {{value: one}}}}
"""
    sid, session = run(llm_producer, llm_record, plan_file)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.plan_version == 2  # a second round, not a re-plan
    (replan_prompt,) = prompts(llm, "replanner")
    assert f"{ADVICE_PREFIX} (lesson {seed_id}" in replan_prompt
    assert lessons.used_by(sid) == [seed_id]
    wait_for(lambda: len(lessons.all()) == 2, 30, "the critic round's lesson")
    (reflector_prompt,) = prompts(llm, "reflector")
    assert "the critic did not pass a round" in reflector_prompt
    assert "no alternative supplier was checked" in reflector_prompt
    new = next(r for r in lessons.all() if r.id != seed_id)
    assert (new.lesson, new.source_session) == (critic_lesson, sid)
