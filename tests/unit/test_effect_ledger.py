"""Unit tests of the SQL effect ledger (on a SQLite file) and its audit file, through the
bundled write tools as a worker runs them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from planloop.core.effects import EffectAudit, SqlEffectLedger
from planloop.core.tools import REGISTRY, ToolContext
from tests.unit.test_toolsets import MINIMAL_PARAMS, WRITE_TOOLS


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SqlEffectLedger]:
    built = SqlEffectLedger(
        f"sqlite:///{tmp_path / 'record.db'}", audit=EffectAudit(tmp_path / "effects.jsonl")
    )
    yield built
    built.dispose()


def ctx(ledger: SqlEffectLedger, attempt: int) -> ToolContext:
    return ToolContext(
        session_id="s1", step_id="step", attempt=attempt, idempotency_key="s1:step", effects=ledger
    )


@pytest.mark.parametrize("name", WRITE_TOOLS)
def test_each_write_tool_applies_once_and_the_audit_names_it(
    name: str, ledger: SqlEffectLedger
) -> None:
    spec = REGISTRY.get(name)
    first = spec.run(MINIMAL_PARAMS[name], ctx(ledger, 1))
    again = spec.run(MINIMAL_PARAMS[name], ctx(ledger, 2))

    assert again == first
    assert ledger.audit is not None
    lines = [json.loads(line) for line in ledger.audit.path.read_text().splitlines()]
    assert len(lines) == 1
    assert lines[0]["tool"] == name
    assert lines[0]["pid"] == os.getpid()
    assert lines[0]["key"] in ("s1:step", "s1:step:undo")
    assert ledger.count(lines[0]["key"]) == 1


def test_the_audit_counts_keys_seen_twice_as_duplicates(tmp_path: Path) -> None:
    audit = EffectAudit(tmp_path / "effects.jsonl")
    assert audit.counts() == {}
    for key in ("a", "b", "a", "c", "a"):
        audit.append(key, "bench.write")

    assert audit.duplicates() == {"a": 3}
    assert audit.count("b") == 1
    assert audit.count("missing") == 0


def test_without_an_audit_the_count_says_whether_sql_holds_the_receipt(tmp_path: Path) -> None:
    ledger = SqlEffectLedger(f"sqlite:///{tmp_path / 'record.db'}")
    assert ledger.count("k") == 0
    ledger.apply_once("k", lambda: {"ok": True})
    assert ledger.count("k") == 1
    ledger.dispose()


def test_a_committed_effect_whose_audit_line_a_kill_lost_counts_once(
    ledger: SqlEffectLedger,
) -> None:
    ledger.apply_once("k", lambda: {"ok": True})
    assert ledger.audit is not None
    ledger.audit.path.write_text("")  # the worker died between the commit and the line
    assert ledger.count("k") == 1
    assert ledger.count("never") == 0
