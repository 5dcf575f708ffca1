"""What the lessons store takes and gives: a new lesson, a search and what it found, the
similarities a lesson needs, and a lesson's measured effect."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from planloop.core.masking import mask_text
from planloop.core.record import LessonRow


@dataclass(frozen=True)
class NewLesson:
    """A sanitized lesson to store, with its vectors (empty: none)."""

    lesson: str
    trigger: str = ""
    evidence: str = ""
    goal: str = ""
    toolsets: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    embedding: tuple[float, ...] = ()
    text_embedding: tuple[float, ...] = ()
    embedding_model: str = ""
    source_session: str = ""
    tool_versions: Mapping[str, str] = field(default_factory=dict)  # learned on these

    def __post_init__(self) -> None:
        # Whoever wrote it (the reflector, a person, a test), no credential is stored.
        for name in ("lesson", "trigger", "evidence", "goal"):
            object.__setattr__(self, name, mask_text(getattr(self, name)))


@dataclass(frozen=True)
class Found:
    """A lesson a search found, with its similarity and how it was measured."""

    id: int
    lesson: str
    trigger: str
    similarity: float
    via: str  # "pgvector", "cosine" or "lexical"


@dataclass(frozen=True)
class Query:
    """What a search looks for: a goal, the session's toolsets, and the goal's vector.

    ``served`` (tool name -> version served now) and ``max_age_days`` decide which lessons
    are stale (never found); ``now`` is epoch seconds, 0 for the current time.
    """

    goal: str
    toolsets: tuple[str, ...]
    embedding: tuple[float, ...] = ()
    embedding_model: str = ""
    served: Mapping[str, str] = field(default_factory=dict)
    max_age_days: float = 0.0
    now: float = 0.0


@dataclass(frozen=True)
class Thresholds:
    """Similarities a lesson needs: with embeddings, and lexically."""

    cosine: float = 0.75
    lexical: float = 0.5

    def passes(self, similarity: float, via: str) -> bool:
        return similarity >= (self.lexical if via == "lexical" else self.cosine)


@dataclass(frozen=True)
class LessonStats:
    """A lesson's measured effect: sessions that used it against similar ones that did not."""

    row: LessonRow
    used: int  # ended sessions that used it
    used_ok: int
    without: int  # ended similar sessions (same toolsets, similar goal) without it
    without_ok: int
    replans_used: float  # mean re-plans of the sessions that used it
    replans_without: float

    @property
    def rate_with(self) -> float | None:
        return self.used_ok / self.used if self.used else None

    @property
    def rate_without(self) -> float | None:
        return self.without_ok / self.without if self.without else None
