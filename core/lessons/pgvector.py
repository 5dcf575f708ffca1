"""Lesson search inside PostgreSQL where the ``vector`` extension is available: the column
beside the JSON vector, and cosine similarity by ``<=>``."""

from __future__ import annotations

import logging

from sqlalchemy import text
from sqlalchemy.engine import Engine

log = logging.getLogger("planloop.core.lessons")  # the name its log lines always had


SET_VECTOR = text("UPDATE lessons SET embedding_vec = CAST(:v AS vector) WHERE id = :i")


VECTOR_COLUMN = "embedding_vec"  # the pgvector column beside the JSON one (literal in SQL)


def enable_pgvector(engine: Engine) -> bool:
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
