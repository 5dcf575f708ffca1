"""SQL faults a process rides out: the database refused a write for now, not for good.

A full disk (``database or disk is full``), a lock held too long (``database is locked``),
a dropped connection or a server restarting say nothing about the rows written: the same
write succeeds once the store recovers. They reach us as :class:`sqlalchemy.exc.
OperationalError` (SQLite and psycopg both map them there) or as a DBAPI error whose
connection SQLAlchemy invalidated. Everything else (a constraint, a type, a bug) is raised.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, OperationalError


def is_store_fault(exc: BaseException) -> bool:
    """True when ``exc`` is a refusal of the SQL store to wait out (see the module)."""
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def store_cause(exc: BaseException) -> str:
    """The database's own words, on one line (``database or disk is full``)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else None
    return " ".join(str(orig or exc).split())[:200]
