"""``planloop tools``: the live tool catalogue by worker and queue, or the local one."""

from __future__ import annotations

from typing import Any

import click

from planloop.core.live_tools import LOCAL_NOTE, CatalogueSource, LiveTools
from planloop.core.tools import ToolRegistry, ToolSpec
from planloop.producer.terminal import terminal_safe

DESCRIPTION_CHARS = 72


def tool_doc(spec: ToolSpec) -> dict[str, Any]:
    """One tool as ``--json`` shows it."""
    return {
        "name": spec.name,
        "description": spec.description,
        "side_effect": spec.side_effect,
        "compensate": spec.compensate,
        "params_schema": spec.params_schema(),
    }


def catalogue_doc(tools: ToolRegistry) -> dict[str, Any]:
    """The catalogue as JSON: ``source`` (live/local), the live ``workers`` with their
    queues and tools, and every listed tool's contract under ``tools``."""
    if not isinstance(tools, LiveTools) or tools.source is CatalogueSource.LOCAL:
        return {
            "source": CatalogueSource.LOCAL.value,
            "note": LOCAL_NOTE,
            "workers": [],
            "tools": [tool_doc(s) for s in tools.specs()],
        }
    listed = set(tools.names())
    workers = [
        {
            "worker": hb.worker,
            "queues": hb.consumed(),
            "tools": sorted(name for name in hb.tools if name in listed),
        }
        for hb in tools.snapshot().workers
    ]
    return {
        "source": CatalogueSource.LIVE.value,
        "workers": workers,
        "tools": [tool_doc(s) for s in tools.specs()],
    }


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= DESCRIPTION_CHARS else line[: DESCRIPTION_CHARS - 1] + "…"


def print_catalogue(tools: ToolRegistry) -> None:
    """One row per tool and worker serving it (worker, queue, tool, description); with no
    live worker, a line saying so and one row per local tool."""
    doc = catalogue_doc(tools)
    described = {t["name"]: _short(str(t["description"])) for t in doc["tools"]}
    if doc["source"] == CatalogueSource.LOCAL.value:
        click.echo(f"{LOCAL_NOTE}:")
        rows = [("-", "-", name, text) for name, text in described.items()]
    else:
        rows = [
            (w["worker"], ",".join(w["queues"]) or "-", name, described.get(name, ""))
            for w in doc["workers"]
            for name in w["tools"]
        ]
    # worker names, queues and descriptions come from whatever workers publish
    safe = terminal_safe
    rows = [(safe(w), safe(q), safe(name), safe(text)) for w, q, name, text in rows]
    header = ("WORKER", "QUEUE", "TOOL", "DESCRIPTION")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        click.echo(
            "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True))
            + "  "
            + row[3]
        )
    if not rows:
        click.echo("(no tools)")
