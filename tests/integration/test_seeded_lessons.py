"""Lessons that hold up, end to end from the installed wheel.

``planloop lessons add`` (a subprocess of the shipped venv) seeds a lesson scoped to a
toolset; the real supervisor's planner prompt (as the scripted server received it) carries
it for a similar goal using that toolset and not for one using another; a lesson learned
on a tool version that is no longer the served one, or older than the max age, is never
injected and is listed stale.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest
from sqlalchemy import update

from planloop.config.settings import Settings
from planloop.core.lesson_freshness import DAY_S
from planloop.core.lessons import LessonStore
from planloop.core.models import SessionOptions, SessionStatus
from planloop.core.record import LessonRow, SqlRecord
from planloop.producer.client import Producer
from planloop.supervisor.session.lessons import ADVICE_PREFIX
from tests.integration.llm_conftest import wait_recorded
from tests.integration.test_planning_loop import prompts
from tests.llm_server import ScriptedLLMServer
from tests.shipped import shipped

pytestmark = pytest.mark.integration

PATTERN = "Restock SKU-1 of category garden from the primary supplier"
SIMILAR_GOAL = "Restock SKU-7 of category garden from the primary supplier"
AVOID = "reserving stock before the ERP count is known"
ERP_STEP = {"id": "erp", "tool": "supply_chain.erp_stock", "params": {"sku": "SKU12345"}}
SHOP_STEP = {"id": "inv", "tool": "ecommerce.inventory", "params": {"product_id": "SKU12345"}}


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``planloop ARGS`` as a user runs it, with the LLM stack's settings."""
    return subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env({**os.environ, **settings.to_env()}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def seed(settings: Settings, toolsets: str = "supply_chain") -> int:
    done = cli(
        settings,
        "lessons",
        "add",
        "--goal-pattern",
        PATTERN,
        "--root-cause",
        "the primary supplier's stock figure lags the ERP",
        "--avoidance",
        AVOID,
        "--suggestion",
        "read supply_chain.erp_stock first",
        "--toolsets",
        toolsets,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["id"])


def planner_prompt(
    llm: ScriptedLLMServer,
    producer: Producer,
    record: SqlRecord,
    tools: list[str],
    step: dict[str, Any],
) -> str:
    """Run a session on SIMILAR_GOAL restricted to ``tools``; its planner prompt."""
    llm.script("planner", {"goal": SIMILAR_GOAL, "steps": [step]})
    sid = producer.submit_goal(SIMILAR_GOAL, tools=tools, options=SessionOptions(mode="plan"))
    session = wait_recorded(producer, record, sid)
    assert session.status == SessionStatus.COMPLETED, session.error
    return prompts(llm, "planner")[-1]


def test_a_seeded_lesson_reaches_the_planner_of_its_toolset_only(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    lessons: LessonStore,
) -> None:
    lesson_id = seed(llm_settings)
    row = lessons.get(lesson_id)
    assert row is not None
    assert json.loads(row.toolsets) == ["supply_chain"]
    assert f"Avoid: {AVOID}." in row.lesson
    assert row.embedding_model == llm_settings.llm_embedding_model  # embedded like learned
    versions = json.loads(row.tool_versions)
    assert versions["supply_chain.erp_stock"].startswith("schema:")
    assert all(name.startswith("supply_chain.") for name in versions)

    used = planner_prompt(llm, llm_producer, llm_record, ["supply_chain"], ERP_STEP)
    assert f"{ADVICE_PREFIX} (lesson {lesson_id}" in used
    assert AVOID in used

    other = planner_prompt(llm, llm_producer, llm_record, ["ecommerce"], SHOP_STEP)
    assert ADVICE_PREFIX not in other
    assert AVOID not in other


def test_a_lesson_whose_tool_changed_is_not_injected_and_is_listed_stale(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    lessons: LessonStore,
) -> None:
    lesson_id = seed(llm_settings)
    row = lessons.get(lesson_id)
    assert row is not None
    # Learned on another params schema of erp_stock than the one the worker serves now.
    learned = {**json.loads(row.tool_versions), "supply_chain.erp_stock": "schema:0ld"}
    with lessons.engine.begin() as conn:
        conn.execute(
            update(LessonRow)
            .where(LessonRow.id == lesson_id)
            .values(tool_versions=json.dumps(learned))
        )

    prompt = planner_prompt(llm, llm_producer, llm_record, ["supply_chain"], ERP_STEP)
    assert ADVICE_PREFIX not in prompt
    assert AVOID not in prompt

    listed = cli(llm_settings, "lessons", "--json")
    assert listed.returncode == 0, listed.stderr
    (doc,) = json.loads(listed.stdout)
    assert doc["id"] == lesson_id
    assert "supply_chain.erp_stock" in doc["stale"]
    table = cli(llm_settings, "lessons")
    assert "stale" in table.stdout


def test_a_lesson_older_than_the_max_age_is_not_injected_and_is_listed_stale(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    lessons: LessonStore,
) -> None:
    lesson_id = seed(llm_settings)
    max_age = llm_settings.lesson_max_age_days
    assert max_age > 0  # the supervisor's setting: lessons age by default
    learned_at = time.time() - (max_age + 10) * DAY_S
    with lessons.engine.begin() as conn:
        conn.execute(
            update(LessonRow).where(LessonRow.id == lesson_id).values(created_at=learned_at)
        )

    prompt = planner_prompt(llm, llm_producer, llm_record, ["supply_chain"], ERP_STEP)
    assert ADVICE_PREFIX not in prompt
    assert AVOID not in prompt

    listed = cli(llm_settings, "lessons", "--json")
    assert listed.returncode == 0, listed.stderr
    (doc,) = json.loads(listed.stdout)
    assert f"older than {max_age:g} days" in doc["stale"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--suggestion", "verify first"], "goal_pattern"),
        (["--goal-pattern", "g", "--root-cause", "why"], "--avoidance or --suggestion"),
        (["--goal-pattern", "g", "--suggestion", "s", "--toolsets", "eco merce"], "toolset"),
    ],
)
def test_a_bad_seeded_lesson_exits_2_with_one_line(
    llm_settings: Settings, lessons: LessonStore, args: list[str], says: str
) -> None:
    done = cli(llm_settings, "lessons", "add", *args)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert says in line
    assert lessons.all() == []
