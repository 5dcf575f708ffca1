"""Lessons for a supervisor's sessions: retrieved into prompts, reflected on at the end.

1. Retrieval (:meth:`LessonMemory.retrieve`): the goal's vector (or none: lexical), the
   session's toolsets, the store's top-k above the threshold among lessons that are not
   stale (a tool they were learned on is served with another version now, or they are
   older than ``lesson_max_age_days``); the search and the lessons it gave are recorded
   against the session, and the prompts get them as advice.
2. Conclusion (:meth:`LessonMemory.conclude`), once the session has ended: its outcome goes
   onto its uses, lessons that do worse than their absence are disabled, and a session that
   went wrong (failed, aborted, re-planned, or a round the critic did not pass) is
   reflected on; each sanitized lesson is embedded and stored or merged with the versions
   of the tools it applies to (``Ended.tool_versions``).

Synchronous (SQL and LLM calls): the session runs these on a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from planloop.config.settings import Settings
from planloop.core.errors import LLMError
from planloop.core.lesson_freshness import versions_for
from planloop.core.lessons import Found, LessonStore, NewLesson, Query, Thresholds, toolsets_of
from planloop.core.masking import is_secret_name
from planloop.core.models import SessionStatus
from planloop.core.record import make_engine
from planloop.planner.embedding import Embedder, NoEmbedder, build_embedder
from planloop.planner.llm import ChatModel, Usage
from planloop.planner.local_embedding import LOCAL_MODEL
from planloop.planner.reflection import LessonDraft, Reflector, SessionStory, sanitize_lesson

log = logging.getLogger(__name__)

ADVICE_PREFIX = "Advice from an earlier session"
GOAL_CHARS = 2000  # a goal as the lessons tables keep it
# Statuses that always call for a reflection (a cancel is the user's choice, not a failure).
BAD_ENDINGS = frozenset({SessionStatus.FAILED, SessionStatus.ABORTED})


@dataclass(frozen=True)
class Ended:
    """What the conclusion needs to know about an ended session."""

    sid: str
    status: SessionStatus
    replans: int
    critic_failed: bool
    story: SessionStory
    secrets: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset()
    sensitive: frozenset[str] = frozenset()
    tool_versions: Mapping[str, str] = field(default_factory=dict)  # served at the end

    @property
    def needs_reflection(self) -> bool:
        return self.status in BAD_ENDINGS or self.replans > 0 or self.critic_failed


def advice(found: Iterable[Found]) -> list[str]:
    """The lessons as prompt lines, each marked as advice from earlier sessions."""
    return [
        f"{ADVICE_PREFIX} (lesson {f.id}, similarity {f.similarity:.2f}): {f.lesson}" for f in found
    ]


class LessonMemory:
    """The lessons of one supervisor process: store, embedder and reflector together."""

    def __init__(
        self,
        settings: Settings,
        store: LessonStore,
        embedder: Embedder,
        chat: ChatModel | None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.chat = chat

    @classmethod
    def from_settings(
        cls, settings: Settings, chat: ChatModel | None, engine: Engine | None = None
    ) -> LessonMemory:
        """On ``engine`` (the record's), else one of its own on ``database_url``."""
        store = LessonStore(engine or make_engine(settings.database_url))
        return cls(settings, store, build_embedder(settings), chat)

    def without_reflection(self) -> LessonMemory:
        """This memory with no model: conclusions record outcomes and never reflect."""
        return LessonMemory(self.settings, self.store, self.embedder, None)

    @property
    def thresholds(self) -> Thresholds:
        return thresholds_for(self.settings, self.embedder)

    # --- 1. retrieval ---------------------------------------------------------------------
    def retrieve(
        self,
        sid: str,
        goal: str,
        tool_names: Collection[str],
        served: Mapping[str, str] | None = None,
    ) -> list[Found]:
        """The lessons for ``goal`` and the toolsets of ``tool_names`` (recorded as used by
        ``sid``), none of them stale against ``served`` (tool name -> version served now)."""
        goal = sanitize_lesson(goal, chars=GOAL_CHARS)  # stored with the search: masked
        vectors = self.embedder.embed([goal]) if goal else None
        query = Query(
            goal=goal,
            toolsets=toolsets_of(tool_names),
            embedding=tuple(vectors[0]) if vectors else (),
            embedding_model=self.embedder.model if vectors else "",
            served=dict(served or {}),
            max_age_days=self.settings.lesson_max_age_days,
        )
        found = self.store.search(
            query, top_k=self.settings.lessons_top_k, thresholds=self.thresholds
        )
        self.store.record_search(sid, query, found)
        if found:
            log.info(
                "session=%s lessons for its prompts: %s",
                sid,
                ", ".join(f"{f.id} ({f.via} {f.similarity:.2f})" for f in found),
            )
        return found

    # --- 2. conclusion --------------------------------------------------------------------
    def conclude(self, ended: Ended, goal: str) -> tuple[list[int], list[Usage]]:
        """Record the outcome, auto-disable, and reflect when the session went wrong.

        Returns:
            The ids of the lessons written (or merged into) and the reflector's usage.
        """
        # The goal is the user's text: it may carry a credential like any other input.
        goal = sanitize_lesson(goal, ended.secrets, (), ended.sensitive, chars=GOAL_CHARS)
        used = self.store.finish(ended.sid, ended.status.value, replans=ended.replans)
        if used:
            self.store.auto_disable(
                used,
                min_uses=self.settings.lessons_auto_disable_min_uses,
                thresholds=self.thresholds,
            )
        if not ended.needs_reflection or self.chat is None:
            return [], []
        reflector = Reflector(self.chat, max_lessons=self.settings.lessons_per_reflection)
        try:
            drafts, usage = reflector.reflect(
                ended.story,
                secrets=ended.secrets,
                outputs=ended.outputs,
                sensitive=ended.sensitive,
            )
        except LLMError as exc:
            log.warning("session=%s reflection failed, no lesson written: %s", ended.sid, exc)
            return [], []
        return self.store_drafts(ended.sid, goal, drafts, ended.tool_versions), [usage]

    def store_drafts(
        self,
        sid: str,
        goal: str,
        drafts: Sequence[LessonDraft],
        served: Mapping[str, str] | None = None,
    ) -> list[int]:
        """Embed and store (or merge) sanitized lessons, each with the ``served`` versions
        of the tools it names (else of its toolsets' tools); return their ids."""
        if not drafts:
            return []
        vectors = self.embedder.embed([goal, *(d.lesson for d in drafts)])
        model = self.embedder.model if vectors else ""
        ids: list[int] = []
        for n, draft in enumerate(drafts):
            new = NewLesson(
                lesson=draft.lesson,
                trigger=draft.trigger,
                evidence=draft.evidence,
                goal=goal,
                toolsets=tuple(draft.applies_to.toolsets),
                tools=tuple(draft.applies_to.tools),
                embedding=tuple(vectors[0]) if vectors else (),
                text_embedding=tuple(vectors[n + 1]) if vectors else (),
                embedding_model=model,
                source_session=sid,
                tool_versions=_learned_on(served or {}, draft),
            )
            lesson_id, merged = self.store.add(
                new,
                duplicate_similarity=self.settings.lessons_duplicate_similarity,
                max_lessons=self.settings.lessons_max,
            )
            log.info(
                "session=%s lesson %d %s: %s",
                sid,
                lesson_id,
                "merged" if merged else "written",
                draft.lesson,
            )
            ids.append(lesson_id)
        return ids


def _learned_on(served: Mapping[str, str], draft: LessonDraft) -> dict[str, str]:
    """The versions a drafted lesson is learned on: its tools', else its toolsets'."""
    if draft.applies_to.tools:
        return {t: served[t] for t in sorted(draft.applies_to.tools) if t in served}
    return versions_for(served, draft.applies_to.toolsets)


def thresholds_for(settings: Settings, embedder: Embedder) -> Thresholds:
    """The similarities a lesson needs with ``embedder``'s vectors (the local model's
    cosines of alike goals run lower than an endpoint's), and lexically."""
    cosine = (
        settings.lessons_min_local_similarity
        if embedder.model == LOCAL_MODEL
        else settings.lessons_min_similarity
    )
    return Thresholds(cosine, settings.lessons_min_lexical_similarity)


def build_lesson_memory(
    settings: Settings, chat: ChatModel | None, engine: Engine | None = None
) -> LessonMemory | None:
    """The process's lesson memory, or None when lessons are off or there is no LLM."""
    if not settings.lessons_enabled or chat is None:
        return None
    return LessonMemory.from_settings(settings, chat, engine)


def known_values(
    params: Iterable[Mapping[str, Any]], outputs: Iterable[Any], sensitive: Collection[str]
) -> tuple[frozenset[str], frozenset[str]]:
    """(secret values, output strings) a lesson must never contain.

    Secrets: string values under a sensitive or secret-looking name, in params and outputs.
    Output strings: every string leaf of the outputs.
    """
    secrets: set[str] = set()
    strings: set[str] = set()

    def walk(value: Any, secret: bool, into_outputs: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                hidden = secret or str(key) in sensitive or is_secret_name(str(key))
                walk(item, hidden, into_outputs)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, secret, into_outputs)
        elif value is not None and not isinstance(value, bool):
            text = str(value)
            if secret:
                secrets.add(text)
            elif into_outputs and isinstance(value, str):
                strings.add(text)

    for p in params:
        walk(p, False, False)
    for o in outputs:
        walk(o, False, True)
    return frozenset(secrets), frozenset(strings)


__all__ = ["ADVICE_PREFIX", "Ended", "LessonMemory", "NoEmbedder", "advice", "known_values"]
