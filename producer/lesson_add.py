"""``planloop lessons add``: a lesson seeded by hand, stored like a learned one.

1. The input (options, or a YAML/JSON file with the same fields) is checked as
   :class:`SeededLesson`: the input limits (no control characters, sizes), toolset names.
2. The lesson text is the Reflexion triple in one line ("Root cause: ... Avoid: ...
   Suggestion: ..."), masked like a reflected lesson; the goal pattern is its search key.
3. Both are embedded with the endpoint's embeddings model when there is one (else the
   search is lexical), and the lesson is stored with the versions of the served tools of
   its toolsets (core/lesson_freshness.py), read from the live catalogue in Redis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError
from planloop.core.input_limits import text_problem
from planloop.core.keys import Keys
from planloop.core.lesson_freshness import served_versions, versions_for
from planloop.core.lessons import LessonStore, NewLesson
from planloop.core.live_tools import read_snapshot
from planloop.core.published_tools import published_spec
from planloop.core.redis_client import redis_address, sync_client
from planloop.planner.embedding import build_embedder
from planloop.planner.reflection import FIELD_CHARS, LESSON_CHARS, sanitize_lesson
from planloop.planner.safe_yaml import YamlLimitError, load_yaml

GOAL_PATTERN_CHARS = 2000  # as the lessons tables keep a goal (supervisor/session/lessons.py)
MANUAL_EVIDENCE = "added by hand (planloop lessons add)"
_TOOLSET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
READ_TIMEOUT_S = 5.0


class BadLessonError(ConfigError):
    """A seeded lesson that does not pass its checks (the CLI's exit 2, one line)."""


class SeededLesson(BaseModel):
    """A lesson as a person writes it (CLI options or a ``--file``)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    goal_pattern: str = Field(
        min_length=1, max_length=GOAL_PATTERN_CHARS, description="The goals it is for."
    )
    root_cause: str = Field("", max_length=FIELD_CHARS, description="What goes wrong.")
    avoidance: str = Field("", max_length=FIELD_CHARS, description="What not to do.")
    suggestion: str = Field("", max_length=FIELD_CHARS, description="What to do instead.")
    toolsets: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("goal_pattern", "root_cause", "avoidance", "suggestion")
    @classmethod
    def _clean_text(cls, value: str) -> str:
        problem = text_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("toolsets")
    @classmethod
    def _toolset_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _TOOLSET.match(name):
                raise ValueError(
                    f"{name!r} is not a toolset name (the prefix of a tool name, e.g. "
                    "ecommerce of ecommerce.inventory)"
                )
        return sorted(set(value))

    def text(self) -> str:
        """The lesson as prompts get it: the Reflexion triple in one line."""
        parts = [
            f"{label}: {value.rstrip('.')}."
            for label, value in (
                ("Root cause", self.root_cause),
                ("Avoid", self.avoidance),
                ("Suggestion", self.suggestion),
            )
            if value
        ]
        return " ".join(parts)


def parse_seeded(fields: Mapping[str, Any]) -> SeededLesson:
    """Check a seeded lesson; a refusal is one line naming the field.

    Raises:
        BadLessonError: a field is missing, too long, has a control character, or the
            lesson says nothing (no avoidance and no suggestion).
    """
    try:
        seeded = SeededLesson.model_validate(dict(fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "lesson"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise BadLessonError(f"lesson {where}: {first['msg']}{more}") from None
    if not (seeded.avoidance or seeded.suggestion):
        raise BadLessonError("a lesson needs --avoidance or --suggestion (what to do)")
    if len(seeded.text()) > LESSON_CHARS:
        raise BadLessonError(
            f"the lesson is {len(seeded.text())} characters with its labels, above "
            f"{LESSON_CHARS}: shorten the root cause, avoidance or suggestion"
        )
    return seeded


def read_lesson_file(path: Path, settings: Settings) -> dict[str, Any]:
    """A lesson file's fields (YAML or JSON; ``toolsets`` a list or a comma list).

    Raises:
        BadLessonError: unreadable, too big, not YAML, or not a mapping.
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadLessonError(f"cannot read {path}: {exc}") from None
    if len(raw.encode()) > settings.max_input_bytes:
        raise BadLessonError(f"{path} is above the limit of {settings.max_input_bytes} bytes")
    try:
        doc = load_yaml(raw, max_alias_nodes=settings.max_yaml_alias_nodes)
    except (YamlLimitError, ValueError) as exc:
        raise BadLessonError(f"{path} is not a lesson file: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise BadLessonError(f"{path} is not a lesson file: a mapping of fields is expected")
    fields = {str(k).replace("-", "_"): v for k, v in doc.items()}
    if isinstance(fields.get("toolsets"), str):
        fields["toolsets"] = split_toolsets(fields["toolsets"])
    return fields


def split_toolsets(text: str) -> list[str]:
    """``"ecommerce, supply_chain"`` -> ``["ecommerce", "supply_chain"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def live_versions(settings: Settings) -> dict[str, str]:
    """Tool name -> version of every tool a live worker serves now (the catalogue).

    Raises:
        redis.RedisError: Redis does not answer (the CLI says so, exit 3).
    """
    client = sync_client(
        redis_address(settings),
        decode_responses=True,
        socket_timeout=READ_TIMEOUT_S,
        socket_connect_timeout=READ_TIMEOUT_S,
    )
    try:
        snapshot = read_snapshot(client, Keys(settings.key_prefix))
    finally:
        client.close()
    return served_versions(published_spec(e) for e in snapshot.served().values())


def add_seeded(
    store: LessonStore, seeded: SeededLesson, settings: Settings, served: Mapping[str, str]
) -> tuple[int, bool]:
    """Embed and store ``seeded`` (or merge it into a near-duplicate); (id, merged)."""
    goal = sanitize_lesson(seeded.goal_pattern, chars=GOAL_PATTERN_CHARS)
    lesson = sanitize_lesson(seeded.text())
    trigger = sanitize_lesson(seeded.root_cause, chars=FIELD_CHARS)
    embedder = build_embedder(settings)
    try:
        vectors = embedder.embed([goal, lesson])
    finally:
        close = getattr(embedder, "close", None)
        if close is not None:
            close()
    new = NewLesson(
        lesson=lesson,
        trigger=trigger,
        evidence=MANUAL_EVIDENCE,
        goal=goal,
        toolsets=tuple(seeded.toolsets),
        embedding=tuple(vectors[0]) if vectors else (),
        text_embedding=tuple(vectors[1]) if vectors else (),
        embedding_model=embedder.model if vectors else "",
        tool_versions=versions_for(served, seeded.toolsets),
    )
    return store.add(
        new,
        duplicate_similarity=settings.lessons_duplicate_similarity,
        max_lessons=settings.lessons_max,
    )


__all__ = [
    "BadLessonError",
    "SeededLesson",
    "add_seeded",
    "live_versions",
    "parse_seeded",
    "read_lesson_file",
    "split_toolsets",
]
