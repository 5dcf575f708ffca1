"""Reflexion: a session that went wrong leaves lessons for similar later goals.

The reflector role sees the goal, how the session ended, its steps with their statuses and
(masked) errors, the decisions' reasons and the critic's feedback. It never sees a tool
output, and whatever it writes is sanitized again before it is stored
(:func:`sanitize_lesson`): masked, stripped of every known secret value and of any tool
output text it may have echoed, and shortened.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from planloop.core.masking import MASK, mask_text
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.prompting import bullets, render_prompt

LESSON_CHARS = 600  # one lesson's text, at most
FIELD_CHARS = 300  # trigger and evidence, each
WHAT_HAPPENED_CHARS = 3000
# Tool output strings shorter than this are too common ("ok", a status word) to strip.
MIN_ECHO_CHARS = 16
OUTPUT_MARK = "[tool output]"
_DATA_BLOCK = re.compile(r"<data>.*?</data>", re.DOTALL)


class AppliesTo(BaseModel):
    """Where a lesson applies: toolset prefixes and tool names (empty: anywhere)."""

    toolsets: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)


class LessonDraft(BaseModel):
    """One lesson as the reflector writes it."""

    trigger: str = Field("", description="What went wrong, one sentence.")
    lesson: str = Field(description="The advice for later sessions.")
    applies_to: AppliesTo = Field(default_factory=AppliesTo)
    evidence: str = Field("", description="What in the session shows it.")


class Reflection(BaseModel):
    """The reflector's answer."""

    lessons: list[LessonDraft] = Field(default_factory=list)


@dataclass(frozen=True)
class SessionStory:
    """What the reflector is told about an ended session (already masked, no outputs)."""

    goal: str
    outcome: str  # e.g. "failed: supplier out of stock" / "completed after 1 re-plan"
    what_happened: Sequence[str]  # decisions' reasons, critic feedback, hints
    steps: Sequence[str]  # "id (tool): status; error: ..."


class Reflector:
    """Asks the reflector role for lessons and sanitizes them."""

    def __init__(self, chat: ChatModel, *, max_lessons: int = 3) -> None:
        self.chat = chat
        self.max_lessons = max_lessons

    def reflect(
        self,
        story: SessionStory,
        *,
        secrets: Collection[str] = (),
        outputs: Collection[str] = (),
        sensitive: Collection[str] = (),
    ) -> tuple[list[LessonDraft], Usage]:
        """At most ``max_lessons`` sanitized lessons from ``story``.

        Args:
            story: The ended session, told without tool outputs.
            secrets: Known secret values (sensitive params): never stored, even if echoed.
            outputs: Tool output strings: replaced if the model echoes one.
            sensitive: Field names the tools mark sensitive (for :func:`mask_text`).

        Raises:
            LLMError: The endpoint failed or kept answering unusable JSON.
        """
        text = "\n".join(f"- {line}" for line in story.what_happened)
        messages = render_prompt(
            "reflector",
            max_lessons=str(self.max_lessons),
            goal=sanitize_lesson(story.goal, secrets, outputs, sensitive, chars=LESSON_CHARS),
            outcome=sanitize_lesson(story.outcome, secrets, outputs, sensitive),
            what_happened=sanitize_lesson(
                text or "(nothing noted)", secrets, outputs, sensitive, chars=WHAT_HAPPENED_CHARS
            ),
            steps=bullets(sanitize_lesson(s, secrets, outputs, sensitive) for s in story.steps),
        )
        answer, usage = self.chat.complete_json(Role.REFLECTOR, messages, Reflection)
        drafts = [
            clean_draft(d, secrets, outputs, sensitive) for d in answer.lessons[: self.max_lessons]
        ]
        return [d for d in drafts if d.lesson], usage


def clean_draft(
    draft: LessonDraft,
    secrets: Collection[str] = (),
    outputs: Collection[str] = (),
    sensitive: Collection[str] = (),
) -> LessonDraft:
    """``draft`` with every text field sanitized and its scope trimmed of blanks."""
    return LessonDraft(
        trigger=sanitize_lesson(draft.trigger, secrets, outputs, sensitive, chars=FIELD_CHARS),
        lesson=sanitize_lesson(draft.lesson, secrets, outputs, sensitive),
        evidence=sanitize_lesson(draft.evidence, secrets, outputs, sensitive, chars=FIELD_CHARS),
        applies_to=AppliesTo(
            toolsets=_names(draft.applies_to.toolsets), tools=_names(draft.applies_to.tools)
        ),
    )


def sanitize_lesson(
    text: str,
    secrets: Collection[str] = (),
    outputs: Collection[str] = (),
    sensitive: Collection[str] = (),
    *,
    chars: int = LESSON_CHARS,
) -> str:
    """``text`` safe to store and to show in later prompts.

    1. ``<data>`` blocks (fenced tool output) are dropped whole.
    2. Every known secret value becomes ``***``; every echoed tool output string becomes
       ``[tool output]`` (longest first, so a value inside another goes with it).
    3. The one masker (:func:`mask_text`) hides ``name=value`` pairs with secret names,
       credentials in URLs and ``Bearer`` tokens.
    4. Whitespace is collapsed and the text cut to ``chars``.
    """
    out = _DATA_BLOCK.sub(OUTPUT_MARK, text)
    for value in sorted({s for s in secrets if s}, key=len, reverse=True):
        out = out.replace(value, MASK)
    for value in sorted({o for o in outputs if len(o) >= MIN_ECHO_CHARS}, key=len, reverse=True):
        out = out.replace(value, OUTPUT_MARK)
    out = " ".join(mask_text(out, sensitive).split())
    return out if len(out) <= chars else out[: chars - 3] + "..."


def _names(items: Iterable[str]) -> list[str]:
    return sorted({i.strip() for i in items if i and i.strip()})
