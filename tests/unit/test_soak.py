"""Unit tests of the soak benchmark's bookkeeping: its plans, the audit file, blame."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench.soak import soak_plan
from bench.soak_faults import Injected, owner_pid
from bench.soak_outcome import count_duplicates
from bench.soak_report import blame
from planloop.core.tools import load_tools
from planloop.planner.validation import validate_plan
from planloop.workers.toolsets import BENCH_TOOLS


def test_soak_plans_are_valid_write_dags() -> None:
    rng = random.Random(3)
    tools = load_tools([BENCH_TOOLS])
    for n in range(20):
        plan = soak_plan(rng, n)
        validate_plan(plan, tools)
        assert {s.tool for s in plan.steps} == {"bench.write"}
        join = plan.steps[-1]
        assert join.id == "join"
        assert 2 <= len(join.dependencies) <= 4


def test_duplicates_come_from_the_audit_file_one_per_extra_application(tmp_path: Path) -> None:
    audit = tmp_path / "effects.jsonl"
    lines = [
        {"key": "s1:a", "tool": "bench.write", "pid": 1, "at": 10.0},
        {"key": "s1:b", "tool": "bench.write", "pid": 1, "at": 11.0},
        {"key": "s1:a", "tool": "bench.write", "pid": 2, "at": 12.5},
        {"key": "s1:a:undo", "tool": "bench.undo_write", "pid": 2, "at": 13.0},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"key": "s1:c", "to'  # cut short
    audit.write_text(text)

    extra, times, trusted = count_duplicates(audit)

    assert trusted
    assert dict(extra) == {"s1:a": 1}
    assert times == [12.5]


def test_without_an_audit_file_the_duplicate_count_is_not_trusted(tmp_path: Path) -> None:
    extra, _times, trusted = count_duplicates(tmp_path / "never-written.jsonl")
    assert not trusted
    assert not extra


def test_a_fault_is_blamed_for_what_follows_it_within_the_window() -> None:
    faults = [Injected("flushall", 100.0, 101.0), Injected("kill_worker", 105.0, 105.2)]
    assert blame(faults, 99.0) == "(none)"
    assert blame(faults, 100.5) == "flushall"
    assert blame(faults, 106.0) == "kill_worker"
    assert blame(faults, 500.0) == "(none)"


def test_theowner_pid_is_read_from_a_supervisor_name_with_dashes_in_the_host() -> None:
    assert owner_pid("sup-vm-7240-058d71") == 7240
    assert owner_pid("") == 0
