"""Question-answering lookups with fixed latencies, for bench/agent_latency.py.

Each tool answers one relation of a subject (the founder of a company, the birth year of a
person, ...) after a fixed delay, like a search or knowledge-base call. The facts are made
up but deterministic (derived from a hash of relation and subject), so any subject has an
answer and a second hop can use the first hop's answer as its subject. Not in the default
catalogue: the benchmark adds ``workers.toolsets.qa`` to ``PLANLOOP_TOOL_MODULES``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel, Field

from planloop.core.tools import ToolContext, simulate, tool
from planloop.workers.toolsets._data import ToolParams, digest

QA_TOOLS = "planloop.workers.toolsets.qa"


@dataclass(frozen=True)
class Relation:
    """One lookup: what it answers, how long it takes, and the kind of value it returns."""

    name: str
    latency_s: float
    answers: str  # "person", "city", "university" or "year"/"count" (numbers)
    low: int = 0  # numeric range of years and counts
    high: int = 0


RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation("founder", 0.5, "person"),
        Relation("birth_year", 0.8, "year", 1925, 1965),
        Relation("capital", 0.3, "city"),
        Relation("founded_year", 0.6, "year", 1100, 1950),
        Relation("population", 0.4, "count", 50_000, 9_000_000),
        Relation("director", 0.7, "person"),
        Relation("release_year", 0.2, "year", 1985, 2020),
        Relation("author", 1.0, "person"),
        Relation("alma_mater", 0.9, "university"),
    )
}

_NAMES = ("Ada", "Boris", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun")
_SURNAMES = ("Ardent", "Belov", "Castell", "Drummond", "Eklund", "Fiore", "Gallo", "Hale")


def fact(relation: str, subject: str) -> str | int:
    """The deterministic answer of ``relation`` for ``subject`` (a name or a number)."""
    spec = RELATIONS[relation]
    number = int(digest("qa", relation, subject.strip().lower())[:12], 16)
    if spec.answers == "person":
        return f"{_NAMES[number % len(_NAMES)]} {_SURNAMES[number // 10 % len(_SURNAMES)]}"
    if spec.answers == "city":
        return f"{subject.split()[0]}grad-{number % 97}"
    if spec.answers == "university":
        return f"University of {_SURNAMES[number % len(_SURNAMES)]}ton"
    return spec.low + number % (spec.high - spec.low)


class LookupParams(ToolParams):
    """Params of every ``qa.*`` lookup."""

    subject: str = Field(min_length=1, max_length=200, description="What to look up.")


class Fact(BaseModel):
    """One looked-up fact."""

    subject: str
    relation: str
    value: str | int = Field(description="The answer: a name, or a year or count.")


def _register(relation: Relation) -> None:
    def lookup(params: LookupParams, ctx: ToolContext) -> Fact:
        simulate(params.simulate, ctx)
        # The fixed delay is the lookup's cost: the benchmark measures the agent around it.
        time.sleep(relation.latency_s)
        value = fact(relation.name, params.subject)
        return Fact(subject=params.subject, relation=relation.name, value=value)

    tool(
        f"qa.{relation.name}",
        description=f"Look up the {relation.name.replace('_', ' ')} of a subject "
        f"(answers a {relation.answers}; takes {relation.latency_s:g} s).",
        params=LookupParams,
        output=Fact,
    )(lookup)


for _relation in RELATIONS.values():
    _register(_relation)
