"""The model of bench/lessons.py: a scripted server that repeats a mistake unless told.

:class:`TwinServer` is the suite's scripted OpenAI-compatible server (tests/llm_server.py,
real HTTP, real token counts, hashed bag-of-words ``/v1/embeddings``) whose planner,
re-planner, decider and reflector answer from what their prompt says instead of a queue:

- the planner plans a goal family's obvious approach, unless the prompt's "Lessons from
  earlier sessions" section names the family's fix (its ``marker``);
- the re-planner, after the obvious approach failed, repeats it too, unless the lesson is
  in its prompt, or, on a seeded draw (``P_READS_ERROR``, the same draw in both arms), it
  follows the hint in the tool's error message;
- the decider re-plans what failed (the supervisor forces ABORT once the budget is spent);
- the reflector writes the family's lesson when its prompt tells of the failed tool.

The failures are real: ``supply_chain.verify_supplier`` refuses the primary supplier of the
SKUs picked here (the bundled supplier data, :func:`supplier_quote`), on a real worker.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass
from typing import Any

from planloop.workers.toolsets._data import supplier_quote
from tests.llm_server import ScriptedLLMServer, _role_of

P_READS_ERROR = 0.5  # how often the re-planner follows the error message's hint
_LESSONS = re.compile(r"## Lessons from earlier sessions[^\n]*\n(.*?)(?:\n## |\Z)", re.DOTALL)

Steps = tuple[tuple[str, dict[str, Any]], ...]


@dataclass(frozen=True)
class Family:
    """Goals that share a pitfall: the obvious steps, the steps that work, the lesson."""

    name: str
    wordings: tuple[str, ...]
    wrong: Steps
    right: Steps
    marker: str  # what a lesson that helps says (the twin looks for it in its prompt)
    lesson: str
    pitfall: bool = True


def _restock_skus() -> list[str]:
    """SKUs whose primary supplier cannot deliver, per the bundled supplier data."""
    out = [
        f"SKU-{n:03d}" for n in range(1, 400) if not supplier_quote(f"SKU-{n:03d}", "primary")[0]
    ]
    return out[:24]


RESTOCK_SKUS = _restock_skus()
OTHER_SKUS = [f"SKU-{n:03d}" for n in range(500, 524)]
CATEGORIES = ("garden", "kitchen", "toys", "outdoor", "office")
RESTOCK = Family(
    "restock",
    (  # the same job for one SKU after another, now and then in other words
        "Restock {sku} from the primary supplier",
        "Restock {sku} from the primary supplier",
        "Restock {sku} from the primary supplier before the {cat} sale",
        "Reorder {sku} from the primary supplier",
    ),
    (("supply_chain.verify_supplier", {"sku": "{sku}", "supplier_id": "primary"}),),
    (("supply_chain.alternative_suppliers", {"sku": "{sku}"}),),
    "alternative supplier",
    "The primary supplier is often out when restocking; check an alternative supplier "
    "(supply_chain.alternative_suppliers) instead of verifying the primary one.",
)
REVIEWS = Family(
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
)
FAMILIES = (RESTOCK, REVIEWS)


@dataclass(frozen=True)
class Goal:
    family: Family
    text: str
    sku: str
    draw: float  # the seeded draw of the re-planner reading the error (same in both arms)


def goals(count: int, seed: int) -> list[Goal]:
    """``count`` goals, two in three of the pitfall family, every one a new SKU/wording."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        family = REVIEWS if n % 3 == 2 else RESTOCK
        pool = RESTOCK_SKUS if family.pitfall else OTHER_SKUS
        sku = pool[n % len(pool)]
        text = rng.choice(family.wordings).format(sku=sku, cat=rng.choice(CATEGORIES))
        out.append(Goal(family, text, sku, rng.random()))
    return out


def steps(chosen: Steps, sku: str, tag: str) -> list[dict[str, Any]]:
    """Plan steps for ``sku``; ``tag`` keeps ids new in a re-plan."""
    return [
        {
            "id": f"{tool.rsplit('.', 1)[-1]}_{tag}{n}",
            "tool": tool,
            "params": {k: v.format(sku=sku) if isinstance(v, str) else v for k, v in p.items()},
            "max_retries": 0,
            "critical": True,
        }
        for n, (tool, p) in enumerate(chosen, 1)
    ]


def lessons_section(prompt: str) -> str:
    """The prompt's "Lessons from earlier sessions" section (empty when there is none)."""
    found = _LESSONS.search(prompt)
    return found.group(1) if found else ""


class TwinServer(ScriptedLLMServer):
    """The scripted server, answering the planning roles as the twin model described above."""

    def __init__(self) -> None:
        super().__init__()
        self.goals: dict[str, Goal] = {}
        self.planned_with_lesson = 0  # planner or re-planner answers that followed a lesson
        self._twin_lock = threading.Lock()
        self._replans = 0

    def expect(self, goal: Goal) -> None:
        self.goals[goal.text] = goal

    def _goal_in(self, prompt: str) -> Goal | None:
        return next((g for text, g in self.goals.items() if text in prompt), None)

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        role = _role_of(body)
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        goal = self._goal_in(prompt)
        reply = self._twin(role, prompt, goal) if goal is not None else None
        if reply is None:
            return super()._answer(body)
        self.script(role, reply)  # through the queue: recorded and counted like any answer
        return super()._answer(body)

    def _twin(self, role: str, prompt: str, goal: Goal) -> dict[str, Any] | None:
        family = goal.family
        told = family.marker.lower() in lessons_section(prompt).lower()
        if role == "planner":
            with self._twin_lock:
                self.planned_with_lesson += told and family.pitfall
            chosen = family.right if told else family.wrong
            return {"goal": goal.text, "steps": steps(chosen, goal.sku, "p")}
        if role == "replanner":
            reads_error = goal.draw < P_READS_ERROR
            with self._twin_lock:
                self.planned_with_lesson += told
                self._replans += 1
                tag = f"r{self._replans}_"
            chosen = family.right if told or reads_error else family.wrong
            return {"steps": steps(chosen, goal.sku, tag), "reasoning": "replace the failed step"}
        if role == "decider":
            return {
                "action": "REPLAN_REMAINING",
                "reasoning": "the supplier check failed; plan around it",
                "steps_to_cancel": [],
                "new_context_hints": [],
                "confidence": 0.8,
            }
        if role == "reflector":
            if "verify_supplier" not in prompt or not family.pitfall:
                return {"lessons": []}
            lesson = {
                "trigger": "supply_chain.verify_supplier refused the primary supplier",
                "lesson": family.lesson,
                "applies_to": {"toolsets": ["supply_chain"], "tools": []},
                "evidence": "the primary supplier check failed and was re-planned",
            }
            return {"lessons": [lesson]}
        return None
