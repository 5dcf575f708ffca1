"""Commands that start again from a session: ``fork`` (a new session from one of its plan
versions, or an edited plan) and ``continue`` (the same session, after its deadline or a
budget ended it); completed steps are never run again (producer/lineage.py)."""

from __future__ import annotations

from pathlib import Path

import click

from planloop.core.errors import PlanloopError
from planloop.producer.cli.options import ROW_ID_MAX, bounded_int, name, session_option
from planloop.producer.cli.root import AS_OPTION, command_settings, fail


@click.command()
@click.argument("session_id", type=name())
@click.option(
    "--version",
    "version",
    type=bounded_int(1, ROW_ID_MAX),
    default=None,
    help="The plan version to start from (default: the latest).",
)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="An edited plan (YAML or JSON) to run instead.",
)
@AS_OPTION
def fork(session_id: str, version: int | None, plan_file: Path | None, actor: str | None) -> None:
    """Start a new session from a plan version of SESSION_ID (or an edited plan): the steps
    it keeps unchanged carry their outputs over and are not run again. Prints the new id."""
    from planloop.core.input_limits import InputLimits
    from planloop.planner.plan import load_plan
    from planloop.producer.client import Producer, os_user

    settings = command_settings()
    try:
        plan = None
        if plan_file is not None:
            plan = load_plan(plan_file, limits=InputLimits.from_settings(settings))
        producer = Producer.from_settings(settings)
        child = producer.fork(session_id, version=version, plan=plan, actor=actor or os_user())
        carried = producer.session(child).carried
    except PlanloopError as exc:
        fail(f"{exc} (nothing was forked)" if "nothing" not in str(exc) else str(exc))
        return
    click.echo(child)
    click.echo(
        f"forked from {session_id}; {len(carried)} step(s) carried over: "
        f"{', '.join(carried) or 'none'}",
        err=True,
    )


@click.command("continue")
@click.argument("session_id", type=name())
@click.option(
    "--max-replans",
    type=session_option("max_replans"),
    default=None,
    help="Re-plans it may make from now on.",
)
@click.option(
    "--deadline",
    "deadline_s",
    type=session_option("deadline_s"),
    default=None,
    help="Seconds from now it may run (default: its own deadline).",
)
@click.option(
    "--max-tokens",
    type=session_option("max_tokens"),
    default=None,
    help="LLM tokens it may spend from now on.",
)
@AS_OPTION
def continue_command(
    session_id: str,
    max_replans: int | None,
    deadline_s: float | None,
    max_tokens: int | None,
    actor: str | None,
) -> None:
    """Resume SESSION_ID, which ended failed or aborted by its deadline or a budget: the same
    session at a new epoch; nothing completed runs again."""
    from planloop.producer.client import Producer, os_user

    try:
        Producer.from_settings(command_settings()).continue_session(
            session_id,
            max_replans=max_replans,
            deadline_s=deadline_s,
            max_tokens=max_tokens,
            actor=actor or os_user(),
        )
    except PlanloopError as exc:
        fail(str(exc))
    click.echo(f"continuing {session_id}")
