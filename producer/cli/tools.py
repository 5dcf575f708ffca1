"""``planloop tools``: the tool catalogue live workers serve."""

from __future__ import annotations

import json

import click

from planloop.producer.cli.root import command_settings


@click.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
def tools_command(as_json: bool) -> None:
    """List the tools live workers serve, by worker and queue (with none live: the local
    catalogue, saying so)."""
    from planloop.producer.client import Producer
    from planloop.producer.tool_views import catalogue_doc, print_catalogue

    producer = Producer.from_settings(command_settings(), on_local_catalogue=lambda note: None)
    try:
        if as_json:
            print(json.dumps(catalogue_doc(producer.tools), indent=2))
        else:
            print_catalogue(producer.tools)
    finally:
        producer.close()
