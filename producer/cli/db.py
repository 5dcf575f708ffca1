"""``planloop db``: the SQL record's schema (upgrade, current)."""

from __future__ import annotations

import sys

import click

from planloop.producer.cli.options import name
from planloop.producer.cli.root import command_settings


@click.group()
def db() -> None:
    """The SQL record's schema (Alembic migrations shipped with Planloop)."""


@db.command("upgrade")
@click.option("--revision", type=name(), default="head", show_default=True, help="Target revision.")
def db_upgrade(revision: str) -> None:
    """Upgrade the record at PLANLOOP_DATABASE_URL (run once before supervisors start)."""
    from planloop.core.migrate import upgrade
    from planloop.core.record import make_engine
    from planloop.core.redis_faults import redact_url

    settings = command_settings(record=True)
    engine = make_engine(settings.database_url)
    try:
        reached = upgrade(engine, revision)
    finally:
        engine.dispose()
    click.echo(f"record at {redact_url(settings.database_url)} is at revision {reached}")


@db.command("current")
def db_current() -> None:
    """Print the record's revision and the newest one; exit 1 when it is behind."""
    from planloop.core.migrate import current_revision, head_revision
    from planloop.core.record import make_engine

    engine = make_engine(command_settings(record=True).database_url)
    try:
        current, head = current_revision(engine), head_revision()
    finally:
        engine.dispose()
    click.echo(f"current {current or '(none)'}, head {head}")
    sys.exit(0 if current == head else 1)
