"""The supervisor's progress notes a view warns about: no worker consumes a queue, no live
worker serves a tool."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planloop.producer.views.cells import clock

NO_CONSUMER_NOTES = (
    "no_consumer",
    "consumer_back",
)  # supervisor/process/no_consumer_watch.py's notes


def consumer_warning(notes: Iterable[Mapping[str, str]]) -> str | None:
    """The no-consumer warning while it holds: the latest of its notes is not the all-clear."""
    latest: Mapping[str, str] | None = None
    for note in notes:
        if note.get("kind") in NO_CONSUMER_NOTES:
            latest = note
    if latest is None or latest.get("kind") != "no_consumer":
        return None
    since = clock(float(latest.get("at") or 0))
    return (
        f"no worker consumed queue {latest.get('queue', '?')} for "
        f"{latest.get('waited_s', '?')} s (noticed at {since}): start a worker on that queue"
    )


# supervisor/session/sending.py's notes: a step no live worker serves waits; a worker serves it
# now; the wait ended and the step failed.
UNSERVED_NOTES = ("unserved", "served", "unserved_failed")


def unserved_warnings(notes: Iterable[Mapping[str, str]]) -> list[str]:
    """One line per tool steps wait for, no live worker serving it (its latest note)."""
    latest: dict[str, Mapping[str, str]] = {}
    for note in notes:
        if note.get("kind") in UNSERVED_NOTES:
            latest[note.get("tool", "?")] = note
    return [
        f"no live worker serves {tool}: step {note.get('step', '?')} waits up to "
        f"{note.get('wait_s', '?')} s for one (noticed at {clock(float(note.get('at') or 0))}): "
        "start a worker whose PLANLOOP_TOOL_MODULES provides it"
        for tool, note in sorted(latest.items())
        if note.get("kind") == "unserved"
    ]
