"""The lessons store: :class:`LessonStore`, reads and writes of the lessons tables."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from typing import cast

from sqlalchemy import Table, delete, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from planloop.core.lessons.columns import (
    compact_json,
    meets,
    names_of,
    staleness,
    vector_of,
    versions_of,
)
from planloop.core.lessons.curation import centroid, join_evidence, usefulness
from planloop.core.lessons.data import Found, LessonStats, NewLesson, Query, Thresholds
from planloop.core.lessons.effect import measured_effect
from planloop.core.lessons.pgvector import SET_VECTOR, enable_pgvector
from planloop.core.record import Base, LessonRow, LessonSessionRow, LessonUseRow
from planloop.core.similarity import cosine, cosine_many, lexical_similarity

log = logging.getLogger("planloop.core.lessons")  # the name its log lines always had


class LessonStore:
    """Reads and writes of the lessons tables over one SQLAlchemy engine."""

    def __init__(self, engine: Engine, *, use_pgvector: bool = True) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        Base.metadata.create_all(engine, tables=lesson_tables())
        self.pgvector = use_pgvector and enable_pgvector(engine)

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
                twin.evidence = join_evidence(twin.evidence, new.evidence)
                twin.toolsets = compact_json(sorted({*names_of(twin.toolsets), *new.toolsets}))
                twin.tools = compact_json(sorted({*names_of(twin.tools), *new.tools}))
                # Learned again now: on the versions served now.
                versions = {**versions_of(twin.tool_versions), **new.tool_versions}
                twin.tool_versions = compact_json(dict(sorted(versions.items())))
                key = centroid(twin, new)
                if key is not None:
                    twin.embedding = compact_json(key)
                    if self.pgvector:
                        db.execute(SET_VECTOR, {"v": twin.embedding, "i": twin.id})
                log.info("lesson %d merged a near-duplicate from %s", twin.id, new.source_session)
                return twin.id, True
            row = LessonRow(
                trigger=new.trigger,
                lesson=new.lesson,
                evidence=new.evidence,
                goal=new.goal,
                toolsets=compact_json(sorted(new.toolsets)),
                tools=compact_json(sorted(new.tools)),
                tool_versions=compact_json(dict(sorted(new.tool_versions.items()))),
                embedding=compact_json(list(new.embedding)) if new.embedding else "",
                text_embedding=compact_json(list(new.text_embedding)) if new.text_embedding else "",
                embedding_model=new.embedding_model if new.embedding else "",
                source_session=new.source_session,
                created_at=now,
            )
            db.add(row)
            db.flush()
            lesson_id = row.id
            if self.pgvector and new.embedding:
                db.execute(SET_VECTOR, {"v": compact_json(list(new.embedding)), "i": lesson_id})
        if max_lessons:
            self.evict(max_lessons)
        return lesson_id, False

    def _duplicate(self, db: Session, new: NewLesson, threshold: float) -> LessonRow | None:
        """The enabled lesson ``new`` nearly repeats (its text), if any."""
        best: tuple[float, LessonRow | None] = (threshold, None)
        for row in db.scalars(select(LessonRow).where(LessonRow.enabled == 1)):
            vec = vector_of(row.text_embedding)
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
        ranked = sorted(self.stats(), key=usefulness)
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
                if not meets(names_of(r.toolsets), query.toolsets):
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
        values = cosine_many(query.embedding, [vector_of(rows[i].embedding) for i in vectored])
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
            {"q": compact_json(list(vector)), "ids": list(ids), "dims": len(vector)},
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
                        toolsets=compact_json(sorted(query.toolsets)),
                        embedding=compact_json(list(query.embedding)) if query.embedding else "",
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
        return [measured_effect(row, ended, users.get(row.id, set()), limits) for row in lessons]

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


def lesson_tables() -> list[Table]:
    return [cast(Table, m.__table__) for m in (LessonRow, LessonUseRow, LessonSessionRow)]
