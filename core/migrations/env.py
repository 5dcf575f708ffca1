"""Alembic's environment for the SQL record: runs on the connection :mod:`core.migrate` passes.

Used through ``planloop db upgrade`` (or the supervisor at start), never through an
``alembic.ini``: the URL comes from the settings, so no file holds a password.
"""

from __future__ import annotations

from alembic import context

from planloop.core.record import Base

config = context.config
connection = config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things: batch mode rebuilds the table instead
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Two processes upgrading at once (supervisors starting together) take turns; the
        # second then finds the schema current. The lock ends with the transaction.
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7401640213)")
    context.run_migrations()
