"""Commands that steer a running session: ``approve``, ``cancel``, ``signal``, ``retry``,
``skip`` (each recorded with who asked, ``--as``)."""

from __future__ import annotations

import click

from planloop.core.errors import PlanloopError
from planloop.producer.cli.options import name, text
from planloop.producer.cli.root import AS_OPTION, command_settings, fail


@click.command()
@click.argument("session_id", type=name())
@click.option(
    "--action",
    type=click.Choice(["continue", "replan_remaining", "replan_full", "abort"]),
    default=None,
    help="What a session whose re-plan budget is spent should do now.",
)
@click.option("--step", type=name(), default=None, help="Let this step (requires_approval) run.")
@click.option("--note", type=text(empty_ok=True), default="", help="Why, for the record.")
@AS_OPTION
def approve(
    session_id: str, action: str | None, step: str | None, note: str, actor: str | None
) -> None:
    """Answer a session waiting for a person: approve a step, or choose an action."""
    from planloop.producer.client import Producer

    if (action is None) == (step is None):
        fail("give either --step STEP_ID or --action ACTION")
        return
    try:
        Producer.from_settings(command_settings()).approve(
            session_id, action, note, step=step, actor=actor
        )
    except PlanloopError as exc:
        fail(str(exc))
    click.echo(f"approval ({step or action}) sent to {session_id}")


@click.command()
@click.argument("session_id", type=name())
@click.option("--reason", type=text(), default="cancelled by user", help="Why, for the report.")
@AS_OPTION
def cancel(session_id: str, reason: str, actor: str | None) -> None:
    """Cancel a session: running steps stop, nothing new starts."""
    from planloop.producer.client import Producer

    try:
        before = Producer.from_settings(command_settings()).cancel(session_id, reason, actor=actor)
    except PlanloopError as exc:
        fail(str(exc))
    if before == "pending":
        click.echo(
            f"cancel requested for {session_id}: it never started; it ends cancelled "
            "when a supervisor takes it"
        )
    else:
        click.echo(f"cancel requested for {session_id}")


@click.command()
@click.argument("session_id", type=name())
@click.argument("text", type=text())
@click.option("--signal", "plain", is_flag=True, help="A plain signal, not a constraint.")
@AS_OPTION
def signal(session_id: str, text: str, plain: bool, actor: str | None) -> None:
    """Tell a running session something new, e.g. "budget is 5k"."""
    from planloop.producer.client import Producer

    try:
        Producer.from_settings(command_settings()).signal(
            session_id, text, constraint=not plain, actor=actor
        )
    except PlanloopError as exc:
        fail(str(exc))
    click.echo(f"signal sent to {session_id}")


@click.command()
@click.argument("session_id", type=name())
@click.argument("step_id", type=name())
@click.option("--note", type=text(empty_ok=True), default="", help="Why, for the record.")
@AS_OPTION
def retry(session_id: str, step_id: str, note: str, actor: str | None) -> None:
    """Run a step that failed for good once more; its skipped dependents wait for it again."""
    from planloop.producer.client import Producer

    try:
        Producer.from_settings(command_settings()).retry_step(
            session_id, step_id, note, actor=actor
        )
    except PlanloopError as exc:
        fail(str(exc))
    click.echo(f"retry of {step_id} sent to {session_id}")


@click.command()
@click.argument("session_id", type=name())
@click.argument("step_id", type=name())
@click.option("--note", type=text(empty_ok=True), default="", help="Why, for the record.")
@AS_OPTION
def skip(session_id: str, step_id: str, note: str, actor: str | None) -> None:
    """Give up a failed (or not yet started) step: it and its dependents end skipped."""
    from planloop.producer.client import Producer

    try:
        Producer.from_settings(command_settings()).skip_step(session_id, step_id, note, actor=actor)
    except PlanloopError as exc:
        fail(str(exc))
    click.echo(f"skip of {step_id} sent to {session_id}")
