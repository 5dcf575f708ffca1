"""The record's SQLite engine shares one file between processes from its very first open."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sqlalchemy import text

from planloop.core.record.engine import make_engine


def test_a_fresh_file_another_connection_is_writing_still_opens_in_wal(tmp_path: Path) -> None:
    """Switching a fresh file to WAL while another process holds its write lock answers
    "database is locked" at once, without SQLite's busy handler: the engine waits it out."""
    path = tmp_path / "record.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE first_writer (x INTEGER)")
    releaser = threading.Timer(0.3, writer.execute, args=("COMMIT",))
    releaser.start()
    try:
        with make_engine(f"sqlite:///{path}").connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("SELECT count(*) FROM first_writer")).scalar() == 0
    finally:
        releaser.join()
        writer.close()
