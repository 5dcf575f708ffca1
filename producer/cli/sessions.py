"""Commands that read a session: ``status``, ``watch``, ``show``."""

from __future__ import annotations

import json

import click

from planloop.core.errors import PlanloopError
from planloop.producer.cli.options import MAX_LISTED, bounded_int, name
from planloop.producer.cli.root import command_settings, exit_for, fail


@click.command()
@click.argument("session_id", type=name(), required=False)
@click.option(
    "--limit",
    type=bounded_int(1, MAX_LISTED),
    default=20,
    show_default=True,
    help="Sessions to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(session_id: str | None, limit: int, as_json: bool) -> None:
    """Show one session (or the newest ones)."""
    from planloop.producer.client import Producer
    from planloop.producer.views import print_status, status_doc

    producer = Producer.from_settings(command_settings())
    try:
        if as_json:
            print(json.dumps(status_doc(producer, session_id, limit), indent=2, default=str))
        else:
            print_status(producer, session_id, limit)
    except PlanloopError as exc:
        fail(str(exc))


@click.command()
@click.argument("session_id", type=name())
def watch(session_id: str) -> None:
    """Watch a session live until it ends."""
    from planloop.producer.client import Producer
    from planloop.producer.watch import watch_session

    producer = Producer.from_settings(command_settings())
    try:
        result = watch_session(producer, session_id)
    except PlanloopError as exc:
        fail(str(exc))
        return
    exit_for(result)


@click.command()
@click.argument("session_id", type=name())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def show(session_id: str, as_json: bool) -> None:
    """Show a session's event timeline, report and DAG (Mermaid)."""
    from planloop.producer.client import Producer
    from planloop.producer.views import print_show

    producer = Producer.from_settings(command_settings())
    try:
        print_show(producer, session_id, as_json=as_json)
    except PlanloopError as exc:
        fail(str(exc))
