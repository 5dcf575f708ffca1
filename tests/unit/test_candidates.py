"""Candidates: a set of step ids scanned in plan order."""

from __future__ import annotations

from contextlib import closing

from planloop.supervisor.session.candidates import Candidates

ORDER = {step: i for i, step in enumerate("abcdef")}


def test_scan_goes_in_plan_order_whatever_the_insertion_order() -> None:
    candidates = Candidates(ORDER, ["e", "b", "f", "a"])
    assert list(candidates.scan()) == ["a", "b", "e", "f"]
    assert list(candidates.scan()) == ["a", "b", "e", "f"], "a scan removes nothing"


def test_discarded_steps_leave_and_readded_ones_appear_once() -> None:
    candidates = Candidates(ORDER, "abc")
    candidates.discard("b")
    assert "b" not in candidates
    assert list(candidates.scan()) == ["a", "c"]
    candidates.add("b")
    candidates.add("b")
    candidates.discard("a")
    candidates.add("a")
    assert list(candidates.scan()) == ["a", "b", "c"]
    assert len(candidates) == 3


def test_discarding_during_a_scan_and_stopping_early() -> None:
    candidates = Candidates(ORDER, "abcdef")
    seen = []
    with closing(candidates.scan()) as steps:
        for step in steps:
            seen.append(step)
            if step in "bd":
                candidates.discard(step)
            if step == "e":
                break
    assert seen == ["a", "b", "c", "d", "e"]
    assert list(candidates.scan()) == ["a", "c", "e", "f"]
    candidates.update("db")
    assert list(candidates.scan()) == ["a", "b", "c", "d", "e", "f"]
