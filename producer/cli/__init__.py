"""The ``planloop`` command line: one module per group of commands, assembled here.

``root`` holds the group and what every command shares; ``submit``, ``sessions`` (read a
session), ``steering`` (act on one), ``lineage`` (fork or continue one), ``lessons``,
``tools``, ``servers`` (start processes), ``db`` and ``users`` hold the commands.
``planloop.producer.cli:main`` is the console script.
"""

from __future__ import annotations

from typing import Any

from planloop.producer.cli import (
    db,
    lessons,
    lineage,
    servers,
    sessions,
    steering,
    submit,
    tools,
    users,
)
from planloop.producer.cli.root import cli
from planloop.producer.cli.submit import read_answer_schema

for command in (
    submit.submit,
    submit.examples,
    sessions.status,
    sessions.watch,
    sessions.show,
    steering.approve,
    steering.cancel,
    steering.signal,
    steering.retry,
    steering.skip,
    lineage.fork,
    lineage.continue_command,
    lessons.lessons,
    tools.tools_command,
    servers.worker,
    servers.supervisor,
    servers.up,
    servers.flower,
    servers.console,
    servers.health,
    db.db,
    users.users,
):
    cli.add_command(command)

__all__ = ["cli", "main", "read_answer_schema"]


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``planloop`` console script."""
    return cli.main(args=argv, prog_name="planloop")
