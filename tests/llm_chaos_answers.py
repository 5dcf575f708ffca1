"""What the seeded hostile model (tests/llm_chaos.py) answers: a good answer for the schema
asked for, and the plausible wrong things built around it."""

from __future__ import annotations

import json
import random
from typing import Any

HUGE_WORDS = 6000  # about 6k tokens of filler in a huge answer
REFUSAL = "I'm sorry, but I can't help with that request."
ANSWER_DATA = {"result": "ok"}  # fits the property test's answer schema


def good_answer(schema: str, rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    """A valid answer for ``schema`` (varied by ``rng``)."""
    if schema in ("CompactPlan", "Plan", "SubGraph", "FullReplan"):
        return _good_plan(schema, rng)
    return _good_judgement(schema, rng, body)


def _good_plan(schema: str, rng: random.Random) -> dict[str, Any]:
    n = rng.randrange(1000)
    if schema in ("CompactPlan", "Plan"):
        steps = [_echo(f"s{i}", f"v{n}-{i}") for i in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            steps.append(_agent(f"a{n}"))
        return {"goal": "chaos", "steps": steps}
    if schema == "SubGraph":
        return {"steps": [_echo(f"r{n}", f"again-{n}")], "reasoning": "try again"}
    if schema == "FullReplan":
        return {"goal": "chaos", "steps": [_echo(f"f{n}", f"full-{n}")]}
    return {"steps": [_echo(f"r{n}", f"again-{n}")], "reasoning": "try again"}


def _good_judgement(schema: str, rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    n = rng.randrange(1000)
    if schema == "ReplanDecision":
        action = rng.choices(
            ["CONTINUE", "REPLAN_REMAINING", "REPLAN_FULL", "ABORT"], [5, 3, 1, 1]
        )[0]
        return {
            "action": action,
            "reasoning": "chaos decides",
            "steps_to_cancel": [],
            "new_context_hints": [],
            "confidence": 0.7,
        }
    if schema == "CriticReply":
        passed = rng.random() < 0.6
        reply: dict[str, Any] = {"passed": passed, "feedback": "" if passed else "more, please"}
        reply["missing"] = [] if passed else ["a detail"]
        if passed:
            reply["answer"] = {"text": "## Answer\nall done", "data": ANSWER_DATA}
        return reply
    if schema == "Answer":
        return {"text": "## Report\nThe steps ran.\n## Advice\nNone.", "data": ANSWER_DATA}
    if schema == "Notes":
        return {"steps": [], "conclusions": ["it ran"], "key_data": [], "open_questions": []}
    if schema == "ReactTurn":
        if turns >= 2 or rng.random() < 0.4:
            return {"thought": "done", "final_answer": ANSWER_DATA}
        return {"thought": "echo", "tool": "bench.echo", "params": {"value": f"t{n}"}}
    if schema == "Route":
        return {"mode": rng.choice(["plan", "react", "answer"]), "reasoning": "chaos"}
    if schema == "Reflection":
        if rng.random() < 0.5:
            return {"lessons": []}
        lesson = {
            "trigger": f"a chaos answer {n} was unusable",
            "lesson": f"Keep bench.echo plans short (chaos {n % 7}).",
            "applies_to": {"toolsets": ["bench"], "tools": ["bench.echo"]},
            "evidence": "the session's record",
        }
        return {"lessons": [lesson]}
    return {"text": "ok"}


def bad_content(fault: str, good: dict[str, Any], rng: random.Random) -> str:
    """The text of a plausible wrong answer of kind ``fault`` built around ``good``."""
    text = json.dumps(good)
    if fault == "empty":
        return ""
    if fault == "partial_json":
        return text[: max(1, len(text) // 2)]
    if fault == "invalid_json":
        return text.replace('"', "'", 3).rstrip("}") + ",}"
    if fault == "prose_around_json":
        return f"Sure! Here is what you asked for:\n```json\n{text}\n```\nHope this helps."
    if fault == "refusal":
        return REFUSAL
    if fault == "unknown_tool":
        return json.dumps(_mutate_tools(good, tool="web.search_everything"))
    if fault == "unknown_params":
        return json.dumps(_mutate_tools(good, params={"no_such_param": rng.randrange(9)}))
    if fault in ("cycle", "unknown_dependency", "answer_off_schema"):
        return json.dumps(_miswired(fault, good))
    if fault == "huge_text":
        filler = " ".join(
            rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(HUGE_WORDS)
        )
        return json.dumps({**good, "thought": filler, "reasoning": filler, "text": filler})
    return text


def _miswired(fault: str, good: dict[str, Any]) -> dict[str, Any]:
    """``good`` with steps that depend on each other or on no step, or an answer whose data
    does not fit the answer schema; answers without either get a wrong shape."""
    steps = list(good.get("steps") or [])
    if fault == "cycle" and steps:
        first = dict(steps[0], id="loop_a", dependencies=["loop_b"])
        return {**good, "steps": [first, dict(steps[0], id="loop_b", dependencies=["loop_a"])]}
    if fault == "unknown_dependency" and steps:
        return {**good, "steps": [dict(steps[0], dependencies=["no_such_step"]), *steps[1:]]}
    if fault == "answer_off_schema" and ("data" in good or "answer" in good):
        off = {"result": 42, "extra": ["not", "asked"]}
        if "answer" in good:
            return {**good, "answer": {"text": "", "data": off}}
        return {**good, "data": off}
    if "final_answer" in good:
        return {**good, "final_answer": "a bare string, not an object"}
    return {"steps": "none", "action": "MAYBE"}


def _mutate_tools(good: dict[str, Any], **change: Any) -> dict[str, Any]:
    """``good`` with its (first) tool or params changed; other answers get a wrong shape."""
    if good.get("steps"):
        steps = [dict(good["steps"][0], **change), *good["steps"][1:]]
        return {**good, "steps": steps}
    if "tool" in good or "final_answer" in good:
        return {"thought": "try", "tool": "bench.echo", "params": {}, **change}
    return {"unexpected": change}


def _echo(step_id: str, value: str) -> dict[str, Any]:
    return {"id": step_id, "tool": "bench.echo", "params": {"value": value}}


def _agent(step_id: str) -> dict[str, Any]:
    return {
        "id": step_id,
        "tool": "agent.react",
        "instruction": "Echo a value, then report it",
        "params": {"tools": ["bench.echo"], "max_iterations": 3},
    }


def schema_name(body: dict[str, Any]) -> str | None:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        return str(fmt["json_schema"].get("name") or "") or None
    return None
