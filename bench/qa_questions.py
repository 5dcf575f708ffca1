"""Multi-hop questions for bench/agent_latency.py, and what a scripted model answers to them.

Each question is a small graph of ``qa.*`` lookups (workers/toolsets/qa.py): comparisons of
two to four entities, each needing one to three hops, plus HotpotQA-style bridge chains with
no parallelism at all. From one question the module derives, deterministically:

- the plan a planner would write (one JSON object, the smallest form Planloop accepts);
- the replies of a ReAct model: one ``Thought/Action/Action Input`` per lookup, in the
  plan's topological order, then a ``Final Answer``;
- the final answer, which the plan side's joiner (summarizer) call returns too.

Both sides perform exactly the same lookups; only the orchestration differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from graphlib import TopologicalSorter

from planloop.planner.plan import Plan, Step
from planloop.workers.toolsets.qa import fact

COMPANIES = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Soylent", "Tyrell")
COUNTRIES = ("Norland", "Estovia", "Valmora", "Kestria", "Ostrava", "Belmar", "Durnia", "Pelago")
FILMS = (
    "Night Harbor",
    "Glass Orchard",
    "Red Meridian",
    "Paper Moons",
    "Iron Lullaby",
    "Dust",
    "Low Tide",
    "Amber Signal",
)
BOOKS = ("The Salt Road", "Winter Ledger", "A Quiet Engine", "Northern Clocks", "Blue Ashes")


@dataclass(frozen=True)
class Lookup:
    """One tool call of a question: ``qa.<relation>`` of a literal subject or of another
    lookup's answer (``of``)."""

    id: str
    relation: str
    subject: str = ""
    of: str = ""  # id of the lookup whose answer is the subject

    @property
    def tool(self) -> str:
        return f"qa.{self.relation}"


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    lookups: tuple[Lookup, ...]
    pick: str  # "min" or "max" over the final hops' values, or "diff" (second minus first)
    finals: tuple[str, ...]  # lookups whose values the answer compares

    @property
    def tagged(self) -> str:
        """The question as submitted: the tag lets the scripted model recognise it."""
        return f"[{self.qid}] {self.text}"

    def subject_of(self, lookup: Lookup, values: dict[str, str | int]) -> str:
        return str(values[lookup.of]) if lookup.of else lookup.subject

    def ordered(self) -> list[Lookup]:
        """Lookups in a topological order (the order a sequential agent calls them in)."""
        by_id = {x.id: x for x in self.lookups}
        graph = {x.id: [x.of] if x.of else [] for x in self.lookups}
        return [by_id[i] for i in TopologicalSorter(graph).static_order()]

    def values(self) -> dict[str, str | int]:
        """Every lookup's answer, computed from the deterministic facts."""
        values: dict[str, str | int] = {}
        for lookup in self.ordered():
            values[lookup.id] = fact(lookup.relation, self.subject_of(lookup, values))
        return values

    def answer(self) -> str:
        values = self.values()
        finals = {f: values[f] for f in self.finals}
        if self.pick == "diff":
            first, second = (int(v) for v in finals.values())
            return f"{second - first}"
        choose = min if self.pick == "min" else max
        winner = choose(finals, key=lambda f: int(finals[f]))
        root = self._root(winner)
        return f"{root.subject} ({finals[winner]})"

    def _root(self, lookup_id: str) -> Lookup:
        by_id = {x.id: x for x in self.lookups}
        lookup = by_id[lookup_id]
        while lookup.of:
            lookup = by_id[lookup.of]
        return lookup

    def plan(self) -> Plan:
        """The planner's plan: one step per lookup, a reference wherever a hop needs another's
        answer. No combine step: the joiner call reads the outputs and answers."""
        steps = [
            Step(
                id=x.id,
                title=f"{x.relation.replace('_', ' ')} of {x.subject or x.of}",
                tool=x.tool,
                params={"subject": f"{{{{{x.of}.output.value}}}}" if x.of else x.subject},
                dependencies=[x.of] if x.of else [],
            )
            for x in self.lookups
        ]
        return Plan(goal=self.tagged, steps=steps)

    def plan_reply(self) -> str:
        """The plan as the planner prompt asks for it: one ``[id, tool, params]`` array per
        step (the dependencies are what the params reference), one step per line
        (planner/compact_plan.py), the steps that need no other step first (the prompt asks
        for the order steps can start in: they are dispatched while the reply streams)."""
        steps = sorted(self.plan().steps, key=lambda s: len(s.dependencies) > 0)  # stable
        lines = [  # the dependencies are the references: left out, as the prompt allows
            json.dumps([s.id, s.tool, s.params], separators=(",", ":")) for s in steps
        ]
        return '{"steps":[\n' + ",\n".join(lines) + "\n]}"

    def react_reply(self, observations: int) -> str:
        """The ReAct model's reply after ``observations`` tool results."""
        order = self.ordered()
        if observations >= len(order):
            return (
                "Thought: I now have every fact the question needs and can compare them.\n"
                f"Final Answer: {self.answer()}"
            )
        values = self.values()
        lookup = order[observations]
        subject = self.subject_of(lookup, values)
        return (
            f"Thought: I need the {lookup.relation.replace('_', ' ')} of {subject}.\n"
            f"Action: {lookup.tool}\n"
            f"Action Input: {json.dumps({'subject': subject})}"
        )

    def joiner_reply(self) -> str:
        """The plan side's final call: the answer from the step outputs."""
        return f"Final Answer: {self.answer()}"


def _two_hop(tag: str, first: str, second: str, subjects: tuple[str, ...]) -> tuple[Lookup, ...]:
    lookups: list[Lookup] = []
    for i, subject in enumerate(subjects):
        lookups += [
            Lookup(f"{tag}{i}", first, subject=subject),
            Lookup(f"{tag}{i}b", second, of=f"{tag}{i}"),
        ]
    return tuple(lookups)


def _template(kind: int, n: int) -> Question:
    """Question ``n`` of template ``kind``; subjects rotate with ``n``."""
    qid = f"q{n:02d}"

    def pick(pool: tuple[str, ...], count: int) -> tuple[str, ...]:
        return tuple(pool[(n + i * 3) % len(pool)] for i in range(count))

    if kind == 0:
        a, b = pick(COMPANIES, 2)
        lookups = _two_hop("f", "founder", "birth_year", (a, b))
        text = f"Whose founder was born earlier, {a}'s or {b}'s?"
        return Question(qid, text, lookups, "min", ("f0b", "f1b"))
    if kind == 1:
        countries = pick(COUNTRIES, 3)
        lookups = _two_hop("c", "capital", "population", countries)
        text = f"Which of {', '.join(countries)} has the most populous capital?"
        return Question(qid, text, lookups, "max", ("c0b", "c1b", "c2b"))
    if kind == 2:
        a, b = pick(COUNTRIES, 2)
        lookups = _two_hop("c", "capital", "founded_year", (a, b))
        text = f"Which is older, the capital of {a} or the capital of {b}?"
        return Question(qid, text, lookups, "min", ("c0b", "c1b"))
    if kind == 3:
        (film,) = pick(FILMS, 1)
        lookups = (
            Lookup("d", "director", subject=film),
            Lookup("r", "release_year", subject=film),
            Lookup("db", "birth_year", of="d"),
        )
        text = f"How old was the director of {film} when the film came out?"
        return Question(qid, text, lookups, "diff", ("db", "r"))
    if kind == 4:
        (book,) = pick(BOOKS, 1)
        lookups = (
            Lookup("a", "author", subject=book),
            Lookup("u", "alma_mater", of="a"),
            Lookup("y", "founded_year", of="u"),
        )
        text = f"When was the university that the author of {book} attended founded?"
        return Question(qid, text, lookups, "max", ("y",))
    if kind == 5:
        films = pick(FILMS, 4)
        lookups = tuple(Lookup(f"r{i}", "release_year", subject=f) for i, f in enumerate(films))
        text = f"Which of {', '.join(films)} was released first?"
        return Question(qid, text, lookups, "min", tuple(x.id for x in lookups))
    companies = pick(COMPANIES, 4)
    lookups = _two_hop("f", "founder", "birth_year", companies)
    text = f"Which of {', '.join(companies)} has the youngest founder?"
    return Question(qid, text, lookups, "max", tuple(f"f{i}b" for i in range(4)))


TEMPLATES = 7


def questions(count: int) -> list[Question]:
    """``count`` questions cycling through the templates (each template once per 7)."""
    return [_template(n % TEMPLATES, n) for n in range(count)]


def by_tag(qs: list[Question]) -> dict[str, Question]:
    return {q.qid: q for q in qs}
