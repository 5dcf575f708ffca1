"""What one fenced write carries: a :class:`Claim` of a session, a :class:`Checkpoint` of
applied events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planloop.core.models import Event


@dataclass(frozen=True)
class Claim:
    """A supervisor taking a session at ``epoch`` (see :meth:`SqlRecord.claim`)."""

    sid: str
    epoch: int
    owner: str
    fields: dict[str, Any]
    plan: tuple[int, str] | None = None


@dataclass
class Checkpoint:
    """What one batch of applied events changed, written in one fenced transaction."""

    session: dict[str, Any] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, Event]] = field(default_factory=list)
    plan_versions: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)  # digest -> JSON, inserted once

    def __bool__(self) -> bool:
        return bool(
            self.blobs
            or self.session
            or self.attempts
            or self.events
            or self.plan_versions
            or self.decisions
            or self.llm_calls
        )
