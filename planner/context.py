"""The results the critic and the summarizer read, fitted to a size budget without a silent cut.

Under the budget every step goes in as it is: its status, error and an output preview. Past
it, the results are compressed, never truncated: every step stays named with its status, and
the text opens with a line that says what was compressed and how.

1. With a model, the compressor role reads the steps in chunks (map: one chunk of rendered
   results -> notes), and the notes are merged (reduce), keeping what matters to a decision: the
   goal's conclusions, key data, the last critique's points and the open questions, plus one
   line per step. A step the model's notes leave out is added back with its status.
2. Without a model, or when the compressor fails, the rule-based ladder shortens every
   output (shorter previews, then top-level keys only, then no output), and at its last rung
   lists the step ids by status.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from planloop.core.errors import LLMError
from planloop.core.masking import mask_text
from planloop.core.values import encode, preview
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.prompting import render_prompt
from planloop.planner.situation import Situation

log = logging.getLogger(__name__)

OUTPUT_CHARS = 1_500  # one output's preview when the results go in as they are
COMPRESSOR_OUTPUT_CHARS = 6_000  # one output's preview as the compressor reads it
ERROR_CHARS = 400  # one step's error text, at the ladder's first rungs
NO_STEPS = "(no steps: no tool was used)"


@dataclass(frozen=True)
class StepResult:
    """One step of the plan as the results show it (its output raw: masked when rendered)."""

    id: str
    tool: str
    title: str
    status: str
    error: str = ""
    output: Any = None
    has_output: bool = False


@dataclass(frozen=True)
class Rung:
    """One rung of the rule-based ladder: how much of each output and error is shown."""

    output: str  # "preview" (a masked preview of ``chars``), "keys" or "none"
    chars: int
    error_chars: int
    how: str  # what the prompt's first line says was done


LADDER = (
    Rung("preview", 400, ERROR_CHARS, "every output cut to a 400-character preview"),
    Rung("preview", 120, 200, "every output cut to a 120-character preview"),
    Rung("keys", 0, 120, "outputs shown by their top-level keys only"),
    Rung("none", 0, 120, "outputs left out; every step named with its status and error"),
)


@dataclass(frozen=True)
class FittedResults:
    """The results text for a prompt, and how it was compressed ("" when it was not)."""

    text: str
    compressed: str = ""


class StepNote(BaseModel):
    """The compressor's line on one step."""

    id: str = Field(description="The step id, exactly as given.")
    status: str = Field("", description="The step's status, as given.")
    note: str = Field("", description="What the step found or why it failed, in one line.")


class Notes(BaseModel):
    """The compressor's notes on one chunk of results (or on merged notes)."""

    steps: list[StepNote] = Field(default_factory=list, description="One line per step.")
    conclusions: list[str] = Field(default_factory=list, description="What the results show.")
    key_data: list[str] = Field(
        default_factory=list, description="Figures and names the goal needs, with their step."
    )
    open_questions: list[str] = Field(
        default_factory=list, description="What the results leave open or contradict."
    )


def render_step(r: StepResult, sensitive: Collection[str], rung: Rung | None = None) -> str:
    """One step as the results show it: ``rung`` None is as it is (a 1,500-character preview)."""
    entry = f"- {r.id} ({r.tool}{': ' + r.title if r.title else ''}): {r.status}"
    if r.error:
        entry += f"; error: {clip(mask_text(r.error), rung.error_chars if rung else 10**6)}"
    if not r.has_output:
        return entry
    kind = "preview" if rung is None else rung.output
    chars = OUTPUT_CHARS if rung is None else rung.chars
    if kind == "preview":
        shown = json.dumps(
            preview(r.output, sensitive, chars=chars), separators=(",", ":"), default=str
        )
        return f"{entry}\n<data>{fence_safe(clip(shown, chars + 80))}</data>"
    if kind == "keys":
        return f"{entry}; output {shape_of(r.output)}"
    return entry


def fits(results: Sequence[StepResult], sensitive: Collection[str], budget_chars: int) -> str:
    """The results as they are when they fit ``budget_chars``, else ""."""
    text = "\n".join(render_step(r, sensitive) for r in results) or NO_STEPS
    return text if len(text) <= budget_chars else ""


def ladder(
    results: Sequence[StepResult], sensitive: Collection[str], budget_chars: int, why: str = ""
) -> FittedResults:
    """The rule-based fallback: the first rung that fits, else the step ids by status."""
    for rung in LADDER:
        body = "\n".join(render_step(r, sensitive, rung) for r in results)
        how = f"{why}{rung.how}"
        head = compressed_line(len(results), budget_chars, how)
        if len(head) + 1 + len(body) <= budget_chars:
            return FittedResults(f"{head}\n{body}", how)
    how = f"{why}steps listed by id and status only"
    by_status: dict[str, list[str]] = {}
    for r in results:
        by_status.setdefault(r.status, []).append(r.id)
    body = "\n".join(f"- {s} ({len(ids)}): {', '.join(ids)}" for s, ids in by_status.items())
    return FittedResults(f"{compressed_line(len(results), budget_chars, how)}\n{body}", how)


def compressed_line(steps: int, budget_chars: int, how: str) -> str:
    """The line that opens compressed results: what was compressed and how."""
    return (
        f"(Results compressed: all {steps} step(s) did not fit {budget_chars} characters; "
        f"{how}. No step is left out.)"
    )


def chunks(entries: Sequence[str], chunk_chars: int) -> list[list[str]]:
    """``entries`` packed in order into chunks of at most ``chunk_chars`` characters; an
    entry longer than that is a chunk of its own, clipped to it."""
    out: list[list[str]] = []
    size = 0
    for entry in entries:
        entry = clip(entry, chunk_chars)
        if not out or size + len(entry) + 1 > chunk_chars:
            out.append([])
            size = 0
        out[-1].append(entry)
        size += len(entry) + 1
    return out


def merge_notes(parts: Sequence[Notes]) -> Notes:
    """The notes of several chunks as one (in order; repeated lines kept once)."""

    def union(items: list[str]) -> list[str]:
        return list(dict.fromkeys(items))

    seen: dict[str, StepNote] = {}
    for part in parts:
        for note in part.steps:
            seen.setdefault(note.id, note)
    return Notes(
        steps=list(seen.values()),
        conclusions=union([c for p in parts for c in p.conclusions]),
        key_data=union([k for p in parts for k in p.key_data]),
        open_questions=union([q for p in parts for q in p.open_questions]),
    )


def render_notes(notes: Notes, results: Sequence[StepResult]) -> str:
    """The merged notes as the critic and the summarizer read them: every step of
    ``results`` named with its status (the model's line when it wrote one), in plan order."""
    by_id = {n.id: n for n in notes.steps}
    lines = ["Steps:"]
    for r in results:
        note = by_id.get(r.id)
        line = f"- {r.id} ({r.tool}): {r.status}"
        if note is not None and note.note:
            line += f" - {mask_text(note.note)}"
        elif r.error:
            line += f"; error: {clip(mask_text(r.error), 120)}"
        lines.append(line)
    for title, items in (
        ("Conclusions", notes.conclusions),
        ("Key data", notes.key_data),
        ("Open questions", notes.open_questions),
    ):
        if items:
            lines += [f"{title}:", *(f"- {mask_text(i)}" for i in items)]
    return "\n".join(lines)


@dataclass(frozen=True)
class Compressed:
    """What the compressor made: its notes ("" when it failed), the chunks it read, why it
    failed, and the usage of every call that was answered (also when a later one failed)."""

    text: str
    chunks: int
    usages: tuple[Usage, ...]
    failure: str = ""


@dataclass
class Compressor:
    """The compressor role: results past the budget -> notes that fit it (map-reduce).

    Attributes:
        chat: The model (called like the critic: usage comes back with every answer).
    """

    chat: ChatModel

    def compress(
        self,
        goal: str,
        critique: str,
        results: Sequence[StepResult],
        sensitive: Collection[str],
        budget_chars: int,
        chunk_chars: int | None = None,
    ) -> Compressed:
        """Notes on ``results`` within ``budget_chars``: one call per chunk (map), the notes
        merged (reduce), and one more call on the merged notes when they still do not fit.
        A failed call or notes over the budget end it with ``failure`` set. Chunks hold
        ``chunk_chars`` (default: ``budget_chars``) of rendered results each."""
        usages: list[Usage] = []
        rung = Rung("preview", COMPRESSOR_OUTPUT_CHARS, ERROR_CHARS, "")
        rendered = [render_step(r, sensitive, rung) for r in results]
        parts = chunks(rendered, chunk_chars or budget_chars)
        target = max(200, budget_chars // (2 * len(parts)))
        try:
            notes = [
                self._ask(goal, critique, "\n".join(p), (n + 1, len(parts)), target, usages)
                for n, p in enumerate(parts)
            ]
            merged = merge_notes(notes)
            text = render_notes(merged, results)
            if len(text) > budget_chars and len(notes) > 1:  # reduce once more
                again = self._ask(
                    goal, critique, merged.model_dump_json(), (1, 1), budget_chars // 2, usages
                )
                text = render_notes(again, results)
        except LLMError as exc:
            return Compressed("", len(parts), tuple(usages), f"the compressor failed: {exc}")
        if len(text) > budget_chars:
            failure = f"the compressor's notes took {len(text)} characters"
            return Compressed("", len(parts), tuple(usages), failure)
        return Compressed(text, len(parts), tuple(usages))

    def compress_situation(
        self, situation: Situation, budget_chars: int
    ) -> tuple[Situation, list[Usage]]:
        """``situation`` with the compressor's notes on its completed steps when their
        outputs take more than ``budget_chars`` (the decider's and the re-planner's
        reports then show the notes, every completed step named); else as it is."""
        done = situation.completed
        size = sum(len(encode(step.output)) for step in done if step.output is not None)
        if size <= budget_chars:
            return situation, []
        # the notes share the report with the goal, events and open steps: a quarter of it
        notes_chars = max(1_000, budget_chars // 4)
        results = [
            StepResult(s.id, s.tool, s.title, s.status, s.error, s.output, s.output is not None)
            for s in done
        ]
        critique = situation.last_feedback
        hidden = set(situation.sensitive)
        made = self.compress(
            situation.goal, critique, results, hidden, notes_chars, chunk_chars=budget_chars
        )
        if made.failure:  # the situation's own ladder shortens the outputs
            log.warning("%s; the situation report's ladder shortens the outputs", made.failure)
            return situation, list(made.usages)
        notes = f"<data>{fence_safe(made.text)}</data>"
        return dataclasses.replace(situation, notes=notes), list(made.usages)

    def _ask(
        self,
        goal: str,
        critique: str,
        chunk: str,
        number: tuple[int, int],
        target: int,
        usages: list[Usage],
    ) -> Notes:
        messages = render_prompt(
            "compressor",
            goal=goal,
            critique=critique or "(no critique yet)",
            chunk=chunk,
            number=str(number[0]),
            of=str(number[1]),
            target_chars=str(target),
        )
        notes, usage = self.chat.complete_json(Role.COMPRESSOR, messages, Notes)
        usages.append(usage)
        return notes


def outputs_key(situation: Situation) -> str:
    """A digest of the situation's completed steps and their outputs (what its notes are of)."""
    done = [(s.id, s.output) for s in situation.completed]
    return hashlib.sha256(json.dumps(done, default=str).encode()).hexdigest()


def fit_results(
    results: Sequence[StepResult],
    *,
    goal: str,
    critique: str,
    sensitive: Collection[str],
    budget_chars: int,
    chat: ChatModel | None,
) -> tuple[FittedResults, list[Usage]]:
    """The results for the critic's and the summarizer's prompts within ``budget_chars``:
    as they are, else the compressor's notes (``chat`` given), else the ladder's; with the
    usage of the compressor calls made."""
    whole = fits(results, sensitive, budget_chars)
    if whole:
        return FittedResults(whole), []
    if chat is None:
        return ladder(results, sensitive, budget_chars), []
    head_room = 300  # for the line that says how the results were compressed
    made = Compressor(chat).compress(
        goal, critique, results, sensitive, max(500, budget_chars - head_room)
    )
    if made.failure:
        log.warning("%s; the rule-based ladder shortens the results", made.failure)
        why = f"{clip(made.failure, 200)}, so "
        return ladder(results, sensitive, budget_chars, why), list(made.usages)
    how = (
        f"the compressor model summarised them in {made.chunks} chunk(s) into notes that keep "
        "the conclusions, key data, the last critique's points and open questions, with one "
        "line per step"
    )
    # the notes are a digest of tool data: fenced like it, so nothing in them is obeyed
    notes = f"<data>{fence_safe(made.text)}</data>"
    return FittedResults(f"{compressed_line(len(results), budget_chars, how)}\n{notes}", how), list(
        made.usages
    )


def shape_of(value: Any) -> str:
    """A value's shape without its content: keys of a mapping, a list's length, a size."""
    if isinstance(value, dict):
        keys = ", ".join(str(k) for k in list(value)[:20])
        more = f" and {len(value) - 20} more" if len(value) > 20 else ""
        return f"keys: {keys}{more}"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    return f"of {len(encode(value))} characters"


def fence_safe(content: str) -> str:
    # a tool could return "</data>" to end the fence early and speak as the prompt
    return content.replace("</data", "<\\/data")


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."
