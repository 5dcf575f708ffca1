"""The lessons store (Reflexion): lessons, their uses and the sessions that searched them.

Tables (core/record/tables.py, same metadata as the rest of the record): ``lessons``,
``lesson_uses`` (lesson x session, with the session's outcome once it ends) and
``lesson_sessions`` (every session that searched, used a lesson or not: the comparison
group).

Search, best first among enabled lessons whose toolsets meet the session's and that are
not stale (core/lesson_freshness.py: a tool they were learned on changed, or too old):

1. PostgreSQL with the ``vector`` extension: ``embedding_vec <=> :query`` (cosine distance)
   in SQL, on a ``vector`` column this module adds beside the JSON one;
2. otherwise cosine over the candidates' JSON vectors in Python (numpy);
3. a lesson without a vector of the query's model, or a query without a vector, is scored
   by :func:`lexical_similarity` against its own (lower) threshold.

Curation: a new lesson whose text is a near-duplicate of an enabled one (similarity at or
above the duplicate threshold) is merged into it; past ``max_lessons`` the least useful go.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy import Table, delete, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from planloop.core.lesson_freshness import in_scope, stale_reason
from planloop.core.masking import mask_text
from planloop.core.record import Base, LessonRow, LessonSessionRow, LessonUseRow
from planloop.core.similarity import cosine, cosine_many, lexical_similarity

log = logging.getLogger(__name__)

SUCCESS = "completed"
_SET_VECTOR = text("UPDATE lessons SET embedding_vec = CAST(:v AS vector) WHERE id = :i")
VECTOR_COLUMN = "embedding_vec"  # the pgvector column beside the JSON one (literal in SQL)


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


class LessonStore:
    """Reads and writes of the lessons tables over one SQLAlchemy engine."""

    def __init__(self, engine: Engine, *, use_pgvector: bool = True) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        Base.metadata.create_all(engine, tables=_tables())
        self.pgvector = use_pgvector and _enable_pgvector(engine)

    # --- writing lessons ------------------------------------------------------------------
    def add(
        self, new: NewLesson, *, duplicate_similarity: float = 0.95, max_lessons: int = 0
    ) -> tuple[int, bool]:
        """Store ``new`` or merge it into a near-duplicate; evict past ``max_lessons``.

        Returns:
            The lesson's id and whether it was merged into an existing one.
        """
        now = time.time()
        with self._sessions.begin() as db:
            twin = self._duplicate(db, new, duplicate_similarity)
            if twin is not None:
                twin.merged += 1
                twin.evidence = _join_evidence(twin.evidence, new.evidence)
                twin.toolsets = _dumps(sorted({*_names(twin.toolsets), *new.toolsets}))
                twin.tools = _dumps(sorted({*_names(twin.tools), *new.tools}))
                # Learned again now: on the versions served now.
                versions = {**_versions(twin.tool_versions), **new.tool_versions}
                twin.tool_versions = _dumps(dict(sorted(versions.items())))
                key = _centroid(twin, new)
                if key is not None:
                    twin.embedding = _dumps(key)
                    if self.pgvector:
                        db.execute(_SET_VECTOR, {"v": twin.embedding, "i": twin.id})
                log.info("lesson %d merged a near-duplicate from %s", twin.id, new.source_session)
                return twin.id, True
            row = LessonRow(
                trigger=new.trigger,
                lesson=new.lesson,
                evidence=new.evidence,
                goal=new.goal,
                toolsets=_dumps(sorted(new.toolsets)),
                tools=_dumps(sorted(new.tools)),
                tool_versions=_dumps(dict(sorted(new.tool_versions.items()))),
                embedding=_dumps(list(new.embedding)) if new.embedding else "",
                text_embedding=_dumps(list(new.text_embedding)) if new.text_embedding else "",
                embedding_model=new.embedding_model if new.embedding else "",
                source_session=new.source_session,
                created_at=now,
            )
            db.add(row)
            db.flush()
            lesson_id = row.id
            if self.pgvector and new.embedding:
                db.execute(_SET_VECTOR, {"v": _dumps(list(new.embedding)), "i": lesson_id})
        if max_lessons:
            self.evict(max_lessons)
        return lesson_id, False

    def _duplicate(self, db: Session, new: NewLesson, threshold: float) -> LessonRow | None:
        """The enabled lesson ``new`` nearly repeats (its text), if any."""
        best: tuple[float, LessonRow | None] = (threshold, None)
        for row in db.scalars(select(LessonRow).where(LessonRow.enabled == 1)):
            vec = _loads(row.text_embedding)
            if new.text_embedding and vec and row.embedding_model == new.embedding_model:
                sim = cosine(new.text_embedding, vec)
            else:
                sim = lexical_similarity(new.lesson, row.lesson)
            if sim >= best[0]:
                best = (sim, row)
        return best[1]

    def evict(self, max_lessons: int) -> list[int]:
        """Delete the least useful lessons past ``max_lessons``: disabled first, then those
        whose sessions succeeded least often, then the least recently used."""
        with self._sessions() as db:
            count = len(db.scalars(select(LessonRow.id)).all())
        if count <= max_lessons:
            return []
        ranked = sorted(self.stats(), key=_usefulness)
        gone = [s.row.id for s in ranked[: count - max_lessons]]
        with self._sessions.begin() as db:
            db.execute(delete(LessonUseRow).where(LessonUseRow.lesson_id.in_(gone)))
            db.execute(delete(LessonRow).where(LessonRow.id.in_(gone)))
        log.info("lessons evicted (store bounded at %d): %s", max_lessons, gone)
        return gone

    # --- searching ------------------------------------------------------------------------
    def search(self, query: Query, *, top_k: int, thresholds: Thresholds) -> list[Found]:
        """The ``top_k`` enabled, fresh lessons most similar to ``query`` above the
        thresholds (a stale one is left out and logged)."""
        if top_k <= 0:
            return []
        now = query.now or time.time()
        with self._sessions() as db:
            rows = []
            for r in db.scalars(select(LessonRow).where(LessonRow.enabled == 1)):
                if not _meets(_names(r.toolsets), query.toolsets):
                    continue
                stale = staleness(r, query.served, now=now, max_age_days=query.max_age_days)
                if stale is not None:
                    log.info("lesson %d left out, stale: %s", r.id, stale)
                    continue
                rows.append(r)
            scored = self._scores(db, rows, query)
        found = [
            Found(r.id, r.lesson, r.trigger, sim, via)
            for r, (sim, via) in zip(rows, scored, strict=True)
            if thresholds.passes(sim, via)
        ]
        found.sort(key=lambda f: (-f.similarity, f.id))
        return found[:top_k]

    def _scores(
        self, db: Session, rows: Sequence[LessonRow], query: Query
    ) -> list[tuple[float, str]]:
        out: list[tuple[float, str]] = [
            (lexical_similarity(query.goal, r.goal or r.lesson), "lexical") for r in rows
        ]
        if not query.embedding:
            return out
        vectored = [
            i
            for i, r in enumerate(rows)
            if r.embedding and r.embedding_model == query.embedding_model
        ]
        if self.pgvector and vectored:
            sims = self._pg_similarities(db, [rows[i].id for i in vectored], query.embedding)
            for i in vectored:
                if rows[i].id in sims:
                    out[i] = (sims[rows[i].id], "pgvector")
            return out
        values = cosine_many(query.embedding, [_loads(rows[i].embedding) for i in vectored])
        for i, sim in zip(vectored, values, strict=True):
            out[i] = (sim, "cosine")
        return out

    def _pg_similarities(
        self, db: Session, ids: Sequence[int], vector: Sequence[float]
    ) -> dict[int, float]:
        """Cosine similarity (1 - ``<=>`` distance) of the lessons ``ids``, in PostgreSQL."""
        result = db.execute(
            text(
                "SELECT id, 1 - (embedding_vec <=> CAST(:q AS vector)) AS sim FROM lessons "
                "WHERE id = ANY(:ids) AND embedding_vec IS NOT NULL "
                "AND vector_dims(embedding_vec) = :dims "
                "ORDER BY embedding_vec <=> CAST(:q AS vector)"
            ),
            {"q": _dumps(list(vector)), "ids": list(ids), "dims": len(vector)},
        )
        return {int(i): float(sim) for i, sim in result}

    # --- uses and outcomes ----------------------------------------------------------------
    def record_search(self, sid: str, query: Query, found: Sequence[Found]) -> None:
        """Note that ``sid`` searched (its goal, toolsets and vector) and used ``found``.

        A session searches once per prompt that gets lessons; a later search adds the uses
        it did not have and keeps the first similarity of a lesson.
        """
        now = time.time()
        with self._sessions.begin() as db:
            if db.get(LessonSessionRow, sid) is None:
                db.add(
                    LessonSessionRow(
                        session_id=sid,
                        goal=query.goal,
                        toolsets=_dumps(sorted(query.toolsets)),
                        embedding=_dumps(list(query.embedding)) if query.embedding else "",
                        embedding_model=query.embedding_model if query.embedding else "",
                        created_at=now,
                    )
                )
            for f in found:
                if db.get(LessonUseRow, (f.id, sid)) is not None:
                    continue
                db.add(
                    LessonUseRow(
                        lesson_id=f.id, session_id=sid, similarity=f.similarity, used_at=now
                    )
                )
                db.execute(
                    update(LessonRow)
                    .where(LessonRow.id == f.id)
                    .values(uses=LessonRow.uses + 1, last_used_at=now)
                )

    def finish(self, sid: str, outcome: str, *, replans: int = 0) -> list[int]:
        """Record ``sid``'s outcome on its search and uses; return the lessons it used."""
        with self._sessions.begin() as db:
            db.execute(
                update(LessonSessionRow)
                .where(LessonSessionRow.session_id == sid)
                .values(outcome=outcome, replans=replans)
            )
            db.execute(
                update(LessonUseRow).where(LessonUseRow.session_id == sid).values(outcome=outcome)
            )
            used = db.scalars(select(LessonUseRow.lesson_id).where(LessonUseRow.session_id == sid))
            return sorted(used.all())

    def used_by(self, sid: str) -> list[int]:
        with self._sessions() as db:
            used = db.scalars(select(LessonUseRow.lesson_id).where(LessonUseRow.session_id == sid))
            return sorted(used.all())

    # --- the measured effect --------------------------------------------------------------
    def stats(
        self, ids: Collection[int] | None = None, *, thresholds: Thresholds | None = None
    ) -> list[LessonStats]:
        """Each lesson's sessions with it against similar ended sessions without it.

        Similar: toolsets that meet the lesson's, and a goal similar to the lesson's source
        goal (cosine of the goals' vectors when both have the same model's, else lexical).
        """
        limits = thresholds or Thresholds()
        with self._sessions() as db:
            query = select(LessonRow).order_by(LessonRow.id)
            if ids is not None:
                query = query.where(LessonRow.id.in_(list(ids)))
            lessons = list(db.scalars(query))
            ended = list(db.scalars(select(LessonSessionRow).where(LessonSessionRow.outcome != "")))
            uses = db.execute(select(LessonUseRow.lesson_id, LessonUseRow.session_id)).all()
        users: dict[int, set[str]] = {}
        for lesson_id, sid in uses:
            users.setdefault(lesson_id, set()).add(sid)
        return [_stats(row, ended, users.get(row.id, set()), limits) for row in lessons]

    def auto_disable(
        self, ids: Collection[int], *, min_uses: int, thresholds: Thresholds
    ) -> list[LessonStats]:
        """Disable the lessons of ``ids`` whose sessions do worse than similar ones without
        them, once both groups have at least ``min_uses`` ended sessions; return them."""
        disabled: list[LessonStats] = []
        for s in self.stats(ids, thresholds=thresholds):
            rate_with, rate_without = s.rate_with, s.rate_without
            if not s.row.enabled or rate_with is None or rate_without is None:
                continue
            if s.used < min_uses or s.without < min_uses or rate_with >= rate_without:
                continue
            reason = (
                f"auto: sessions with it succeeded {s.used_ok}/{s.used} ({rate_with:.0%}), "
                f"similar ones without it {s.without_ok}/{s.without} ({rate_without:.0%})"
            )
            self.disable(s.row.id, reason)
            log.warning("lesson %d disabled automatically: %s", s.row.id, reason)
            disabled.append(s)
        return disabled

    # --- the CLI's operations -------------------------------------------------------------
    def get(self, lesson_id: int) -> LessonRow | None:
        with self._sessions() as db:
            return db.get(LessonRow, lesson_id)

    def all(self) -> list[LessonRow]:
        with self._sessions() as db:
            return list(db.scalars(select(LessonRow).order_by(LessonRow.id)))

    def disable(self, lesson_id: int, reason: str = "disabled by a person") -> bool:
        return self._set_enabled(lesson_id, 0, reason)

    def enable(self, lesson_id: int) -> bool:
        return self._set_enabled(lesson_id, 1, "")

    def _set_enabled(self, lesson_id: int, enabled: int, reason: str) -> bool:
        with self._sessions.begin() as db:
            done = db.execute(
                update(LessonRow)
                .where(LessonRow.id == lesson_id)
                .values(enabled=enabled, disabled_reason=reason)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def delete(self, lesson_id: int) -> bool:
        with self._sessions.begin() as db:
            db.execute(delete(LessonUseRow).where(LessonUseRow.lesson_id == lesson_id))
            done = db.execute(delete(LessonRow).where(LessonRow.id == lesson_id))
            return bool(done.rowcount)  # type: ignore[attr-defined]


def toolsets_of(tool_names: Collection[str]) -> tuple[str, ...]:
    """The toolset prefixes (``supply_chain`` of ``supply_chain.erp_stock``) of tools."""
    return tuple(sorted({n.split(".", 1)[0] for n in tool_names if n}))


def _tables() -> list[Table]:
    return [cast(Table, m.__table__) for m in (LessonRow, LessonUseRow, LessonSessionRow)]


def _enable_pgvector(engine: Engine) -> bool:
    """On PostgreSQL with the ``vector`` extension available: create it and the lessons'
    ``vector`` column; False anywhere else (the search runs in Python then)."""
    if engine.dialect.name != "postgresql":
        return False
    with engine.begin() as conn:
        available = conn.execute(
            text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
        if available is None:
            log.info("PostgreSQL has no pgvector extension: lesson search runs in Python")
            return False
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        conn.execute(text("ALTER TABLE lessons ADD COLUMN IF NOT EXISTS embedding_vec vector"))
    return True


def staleness(
    row: LessonRow, served: Mapping[str, str], *, now: float, max_age_days: float
) -> str | None:
    """Why the lesson of ``row`` is stale against the ``served`` tool versions, or None."""
    return stale_reason(
        _versions(row.tool_versions),
        served,
        created_at=row.created_at,
        now=now,
        max_age_days=max_age_days,
    )


def _meets(lesson_toolsets: Sequence[str], toolsets: Sequence[str]) -> bool:
    return in_scope(lesson_toolsets, toolsets)


def _similar_goal(row: LessonRow, session: LessonSessionRow, limits: Thresholds) -> bool:
    lesson_vec, goal_vec = _loads(row.embedding), _loads(session.embedding)
    if lesson_vec and goal_vec and row.embedding_model == session.embedding_model:
        return limits.passes(cosine(lesson_vec, goal_vec), "cosine")
    return limits.passes(lexical_similarity(row.goal or row.lesson, session.goal), "lexical")


def _stats(
    row: LessonRow, ended: Sequence[LessonSessionRow], users: set[str], limits: Thresholds
) -> LessonStats:
    toolsets = _names(row.toolsets)
    with_it = [s for s in ended if s.session_id in users]
    without = [
        s
        for s in ended
        if s.session_id not in users
        and _meets(toolsets, _names(s.toolsets))
        and _similar_goal(row, s, limits)
    ]
    return LessonStats(
        row=row,
        used=len(with_it),
        used_ok=sum(s.outcome == SUCCESS for s in with_it),
        without=len(without),
        without_ok=sum(s.outcome == SUCCESS for s in without),
        replans_used=_mean([s.replans for s in with_it]),
        replans_without=_mean([s.replans for s in without]),
    )


def _usefulness(s: LessonStats) -> tuple[int, float, float, float]:
    """Sort key, least useful first."""
    rate = s.rate_with if s.rate_with is not None else 0.5  # unproven: in the middle
    return (s.row.enabled, rate, s.row.last_used_at, s.row.created_at)


def _centroid(row: LessonRow, new: NewLesson) -> list[float] | None:
    """The mean of the goals' vectors a merged lesson came from (each source goal counted
    once): the key then finds the goals the lesson is about, not the first one's wording.
    None when the vectors are not comparable."""
    old = _loads(row.embedding)
    if not old or not new.embedding or row.embedding_model != new.embedding_model:
        return None
    if len(old) != len(new.embedding):
        return None
    weight = row.merged  # sources before this one (1 + earlier merges; bumped already)
    mean = [(o * weight + n) / (weight + 1) for o, n in zip(old, new.embedding, strict=True)]
    norm = sum(v * v for v in mean) ** 0.5
    return [v / norm for v in mean] if norm else None


def _mean(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _join_evidence(old: str, new: str) -> str:
    if not new or new in old:
        return old
    joined = f"{old}; {new}" if old else new
    return joined if len(joined) <= 600 else joined[:597] + "..."


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _loads(raw: str) -> list[float]:
    """A JSON vector (empty when none)."""
    if not raw:
        return []
    value = json.loads(raw)
    return [float(v) for v in value] if isinstance(value, list) else []


def _versions(raw: str) -> dict[str, str]:
    """A JSON object tool name -> version (empty when none)."""
    value = json.loads(raw) if raw else {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _names(raw: str) -> list[str]:
    """A JSON list of names (toolsets, tools)."""
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else []
