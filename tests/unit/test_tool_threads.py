"""ToolThreads: tool calls on reused daemon threads; a hung call keeps its own thread."""

from __future__ import annotations

import threading

import pytest

from planloop.workers.tool_threads import ToolThreads


def test_calls_reuse_an_idle_thread() -> None:
    threads = ToolThreads()
    names = set()
    for i in range(20):
        assert threads.submit(lambda i=i: i * 2).result(5) == i * 2
        names.add(threads.submit(lambda: threading.current_thread().ident).result(5))
    assert len(names) <= 2, "every call started a thread of its own"


def test_a_failure_comes_back_to_the_caller() -> None:
    def fail() -> None:
        raise KeyError("sku")

    assert isinstance(ToolThreads().submit(fail).exception(5), KeyError)


def test_a_hung_call_does_not_block_the_next_one() -> None:
    threads = ToolThreads()
    release = threading.Event()
    hung = threads.submit(release.wait)
    with pytest.raises(TimeoutError):
        hung.result(0.05)
    assert threads.submit(lambda: "next").result(5) == "next"
    release.set()
    assert hung.result(5) is True
    assert all(t.daemon for t in threading.enumerate() if t.name == "planloop-tool")
