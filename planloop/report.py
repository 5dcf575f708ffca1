"""What :meth:`planloop.Client.wait` returns: an ended session's report with its full outputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planloop.core.models import SessionRecord, SessionStatus


@dataclass(frozen=True)
class StepResult:
    """One step of an ended session: how it ended and, when it completed, its full output."""

    id: str
    tool: str
    status: str
    attempts: int = 0
    output: Any = None
    error: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Answer:
    """The summarizer's final answer of an LLM session: prose, and ``data`` when the session
    asked for an answer schema."""

    text: str = ""
    data: Any = None


@dataclass(frozen=True)
class Report:
    """An ended session: status, error, per-step results with their outputs, the answer.

    ``raw`` is the report as ``planloop show --json`` prints it (masked, large outputs shown
    as previews); ``steps[...].output`` and :attr:`outputs` hold the full values.
    """

    session_id: str
    status: SessionStatus
    goal: str = ""
    error: str | None = None
    replans: int = 0
    plan_version: int = 1
    duration_s: float | None = None
    steps: list[StepResult] = field(default_factory=list)
    answer: Answer | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the session completed."""
        return self.status is SessionStatus.COMPLETED

    @property
    def outputs(self) -> dict[str, Any]:
        """Full outputs of the completed steps, by step id."""
        return {s.id: s.output for s in self.steps if s.status == "completed"}

    def step(self, step_id: str) -> StepResult:
        """The result of ``step_id``.

        Raises:
            KeyError: the plan had no such step.
        """
        for entry in self.steps:
            if entry.id == step_id:
                return entry
        raise KeyError(step_id)


def build_report(record: SessionRecord, outputs: Mapping[str, Any]) -> Report:
    """A :class:`Report` of the ended session ``record``; ``outputs`` are the full outputs by
    step id (a step missing there keeps the report's own, possibly previewed, output)."""
    raw = record.report or {}
    steps = [
        StepResult(
            id=str(entry.get("id", "")),
            tool=str(entry.get("tool", "")),
            status=str(entry.get("status", "")),
            attempts=int(entry.get("attempts") or 0),
            output=outputs.get(str(entry.get("id")), entry.get("output")),
            error=entry.get("error"),
            duration_s=entry.get("duration_s"),
        )
        for entry in raw.get("steps", [])
    ]
    found = record.answer
    answer = Answer(text=str(found.get("text", "")), data=found.get("data")) if found else None
    return Report(
        session_id=record.id,
        status=record.status,
        goal=record.goal,
        error=record.error or raw.get("error") or None,
        replans=record.replans,
        plan_version=record.plan_version,
        duration_s=raw.get("duration_s"),
        steps=steps,
        answer=answer,
        raw=dict(raw),
    )
