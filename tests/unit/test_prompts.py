"""Prompt templates and the blocks that fill them: ROLE lines, tool catalogue, outlines."""

from __future__ import annotations

import json
from importlib import resources
from typing import TypeVar

import pytest
from pydantic import BaseModel

from planloop.core.errors import ConfigError
from planloop.core.tools import load_tools
from planloop.planner.decider import Decider
from planloop.planner.llm import Role, Usage
from planloop.planner.plan import Plan, Step
from planloop.planner.prompting import (
    bullets,
    load_template,
    plan_outline,
    planning_schema,
    render_prompt,
    tool_catalogue,
)
from planloop.planner.situation import Situation, StepView

T = TypeVar("T", bound=BaseModel)

# Every template with the placeholders it takes.
TEMPLATES = {
    "planner": ("planner", ["goal", "constraints", "lessons", "catalogue"]),
    "replanner_remaining": (
        "replanner",
        ["situation", "plan_outline", "completed", "removed", "kept", "lessons", "catalogue"],
    ),
    "replanner_full": (
        "replanner",
        ["situation", "plan_outline", "completed", "lessons", "catalogue"],
    ),
    "decider": ("decider", ["situation", "cancellable", "replans_left", "max_replans"]),
    "react": ("react", ["instruction", "context", "catalogue", "max_iterations"]),
    "router": ("router", ["goal", "lessons", "catalogue"]),
    "reflector": ("reflector", ["max_lessons", "goal", "outcome", "what_happened", "steps"]),
    "compressor": ("compressor", ["goal", "critique", "chunk", "number", "of", "target_chars"]),
    "summarizer": (
        "summarizer",
        ["goal", "outcome", "results", "critique", "answer_schema", "shape"],
    ),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_starts_with_its_role_line_and_fills_every_placeholder(name: str) -> None:
    role, keys = TEMPLATES[name]
    values = {key: f"<<{key}>>" for key in keys}
    system, user = render_prompt(name, **values)
    assert system["role"] == "system"
    assert user["role"] == "user"
    assert system["content"].splitlines()[0] == f"ROLE: {role}"
    text = system["content"] + user["content"]
    for key in keys:
        assert f"<<{key}>>" in text
    assert "$" not in text  # no placeholder left unfilled


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_a_missing_value_is_a_clear_error(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"prompt template '{name}' needs a value for \$"):
        render_prompt(name)


def test_unknown_template_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="'nope' is missing"):
        load_template("nope")


def test_catalogue_lists_every_tool_with_its_schema_and_no_simulate_field() -> None:
    tools = load_tools()
    text = tool_catalogue(tools)
    for spec in tools.specs():
        assert f"### {spec.name}\n{spec.description}" in text
        assert json.dumps(planning_schema(spec), separators=(",", ":")) in text
    assert '"product_id"' in text
    assert '"days":{"default":30' in text
    assert "undone by supply_chain.cancel_reservation" in text
    assert "simulate" not in text
    assert "Simulation" not in text


def test_planning_schema_drops_simulate_and_its_definitions_only() -> None:
    spec = load_tools().get("ecommerce.order_stats")
    schema = planning_schema(spec)
    assert "simulate" in spec.params_schema()["properties"]  # the tool still honours it
    assert set(schema["properties"]) == {"product_id", "days"}
    assert schema["required"] == ["product_id"]
    assert "$defs" not in schema
    assert "title" not in schema["properties"]["product_id"]


def test_compact_catalogue_is_one_line_per_tool() -> None:
    tools = load_tools()
    text = tool_catalogue(tools, compact=True)
    assert len(text.splitlines()) == len(tools.names())
    assert "- ecommerce.order_stats(product_id: string, days?: integer = 30): " in text
    assert "simulate" not in text
    assert len(text) < len(tool_catalogue(tools)) / 2


def test_plan_outline_and_bullets() -> None:
    plan = Plan(
        steps=[
            Step(id="a", tool="ecommerce.inventory", params={"product_id": "X"}),
            Step(id="b", tool="ecommerce.reviews", params={"product_id": "X"}, dependencies=["a"]),
        ]
    )
    assert plan_outline(plan, {"a": "completed"}) == (
        "- a: ecommerce.inventory [completed]\n- b: ecommerce.reviews [pending] after a"
    )
    assert bullets([]) == "(none)"
    assert bullets(["x", "y"]) == "- x\n- y"


def test_every_template_in_the_package_starts_with_a_known_role_line() -> None:
    """Every prompt file (not only those listed above: new roles' too) is a role's system
    prompt whose first line names that role, so a scripted server can answer by role."""
    folder = resources.files("planloop.planner").joinpath("prompts")
    names = sorted(p.name.removesuffix(".md") for p in folder.iterdir() if p.name.endswith(".md"))
    assert set(TEMPLATES) <= set(names)
    roles = {role.value for role in Role}
    for name in names:
        system, _ = load_template(name)
        first = system.template.splitlines()[0]
        assert first.startswith("ROLE: "), name
        assert first.removeprefix("ROLE: ") in roles, name


def test_the_decider_sends_the_model_its_role_line_first() -> None:
    """The prompt built in code (not just the file) reaches the model with ``ROLE: decider``."""
    seen: list[tuple[Role, list[dict[str, str]]]] = []

    class Recording:
        def complete_json(
            self, role: Role, messages: list[dict[str, str]], schema: type[T]
        ) -> tuple[T, Usage]:
            seen.append((role, messages))
            answer = schema.model_validate({"action": "CONTINUE", "reasoning": "fine"})
            return answer, Usage(1, 1, 0.0, "m", str(role))

    situation = Situation(
        goal="g",
        constraints=(),
        steps=(StepView(id="a", tool="t", title="", status="failed", attempts=1, error="x"),),
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="test",
    )
    Decider(Recording()).decide(situation, sensitive=set())
    role, messages = seen[0]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].splitlines()[0] == f"ROLE: {role.value}" == "ROLE: decider"


def test_the_decider_reads_the_scope_rules_pick_and_what_it_means() -> None:
    seen: list[list[dict[str, str]]] = []

    class Recording:
        def complete_json(
            self, role: Role, messages: list[dict[str, str]], schema: type[T]
        ) -> tuple[T, Usage]:
            seen.append(messages)
            answer = schema.model_validate({"action": "CONTINUE", "reasoning": "fine"})
            return answer, Usage(1, 1, 0.0, "m", str(role))

    pick = "REPLAN_FULL (3 of 4 steps downstream of a, 3 levels deep, 0 re-plans so far)"
    situation = Situation(
        goal="g",
        constraints=(),
        steps=(StepView(id="a", tool="t", title="", status="failed", attempts=1, error="x"),),
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="test",
        scope_pick=pick,
    )
    Decider(Recording()).decide(situation, sensitive=set())
    system, user = seen[0][0]["content"], seen[0][-1]["content"]
    assert f"Scope rule (full or incremental re-plan): {pick}." in user
    assert "the report's \"Scope rule\" line gives the rule policy's pick" in system
    assert "When none are left you are not asked any more" in system
