"""The no-consumer bookkeeping: one warning per episode, cleared when a worker consumes."""

from __future__ import annotations

import io

from rich.console import Console

from planloop.core.models import SessionRecord, SessionStatus
from planloop.producer.views import consumer_warning
from planloop.producer.watch import WatchState, note_line, render
from planloop.supervisor.process.no_consumer_watch import ConsumerNews, ConsumerWatch


def test_a_queue_that_does_not_shrink_is_due_after_the_warning_delay() -> None:
    watch = ConsumerWatch(warn_after_s=30, since=0.0)
    watch.look(10, 5)
    watch.look(20, 6)  # grew (a re-sent copy): not consumption
    assert not watch.due(29)
    watch.look(31, 6)
    assert watch.due(31)
    assert watch.waited_s(31) == 31


def test_a_shrinking_or_empty_queue_restarts_the_clock() -> None:
    watch = ConsumerWatch(warn_after_s=30, since=0.0)
    watch.look(10, 5)
    watch.look(25, 4)
    assert not watch.due(50)
    watch.look(60, 0)
    assert not watch.due(85)
    assert watch.due(91)


def test_one_warning_per_episode_and_the_all_clear_once() -> None:
    watch = ConsumerWatch(warn_after_s=30, since=0.0)
    watch.look(31, 3)
    assert watch.due(31)
    watch.warn(31)
    assert not watch.due(100), "warned once: the episode is not warned about again"
    assert watch.news() is None
    watch.look(101, 2)
    assert watch.news() == ConsumerNews.CONSUMER_BACK
    assert watch.news() is None, "the all-clear comes once"
    watch.look(140, 2)
    assert watch.due(140), "a new episode warns again"


def test_status_shows_the_warning_until_the_all_clear() -> None:
    warned = {"kind": "no_consumer", "at": "1.0", "queue": "q1", "waited_s": "31"}
    text = consumer_warning([{"kind": "started"}, warned])
    assert text is not None
    assert "no worker consumed queue q1 for 31 s" in text
    assert consumer_warning([warned, {"kind": "consumer_back", "queue": "q1"}]) is None
    assert consumer_warning([{"kind": "ended"}]) is None
    assert note_line(warned).split()[1:3] == ["WARNING", "note"]


def test_the_live_watch_header_shows_the_warning_while_the_session_runs() -> None:
    view = WatchState("s1", record=SessionRecord(id="s1", status=SessionStatus.RUNNING))
    view.warning = consumer_warning([{"kind": "no_consumer", "queue": "q1", "waited_s": "31"}])
    console = Console(file=io.StringIO(), width=200)
    console.print(render(view))
    assert isinstance(console.file, io.StringIO)
    assert "WARNING: no worker consumed queue q1 for 31 s" in console.file.getvalue()
