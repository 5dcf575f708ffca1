"""The supervisor's garbage-collector settings: start-up's objects frozen out of every pass,
full passes ten times rarer than CPython's default, young ones unchanged."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from planloop.supervisor.process.serve import FULL_GC_AFTER, settle_heap


@pytest.fixture
def restored_gc() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    yield before
    gc.unfreeze()
    gc.set_threshold(*before)


def test_settle_heap_freezes_start_up_and_spaces_full_passes(
    restored_gc: tuple[int, int, int],
) -> None:
    young, middle, _ = restored_gc
    made_at_start_up = [[] for _ in range(10)]  # tracked by the collector
    settle_heap()
    assert gc.get_freeze_count() >= len(made_at_start_up) > 0
    assert gc.get_threshold() == (young, middle, FULL_GC_AFTER)
    assert FULL_GC_AFTER > 10, "rarer than CPython's default"
