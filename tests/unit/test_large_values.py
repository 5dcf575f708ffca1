"""Large values: limits, references read back by the worker, previews."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from pydantic import ValidationError

from planloop.config.settings import Settings
from planloop.core.errors import OutputTooLarge, PermanentToolError
from planloop.core.hot_state import HotState, blob_digest
from planloop.core.models import StepTaskArgs
from planloop.core.tools import REGISTRY, MemoryEffectLedger
from planloop.core.values import PREVIEW_CHARS, ValueLimits, ValueRef, encode, preview, walk
from planloop.planner.situation import Situation, StepView, render_situation
from planloop.producer.views import output_cell
from planloop.workers.executor import StepExecutor
from planloop.workers.toolsets import bench  # noqa: F401  (registers the bench tools)

TOOLS = REGISTRY.subset(["bench"])


class RecordingState:
    """The two calls the executor makes to the hot state, and the stored values it reads."""

    def __init__(self, blobs: dict[str, str] | None = None) -> None:
        self.blobs = blobs or {}
        self.outcomes: list[dict[str, Any]] = []

    def start_attempt(self, *_: Any, **__: Any) -> int:
        return 1  # claimed

    def record_outcome(self, sid: str, step_id: str, **outcome: Any) -> str:
        self.outcomes.append(outcome)
        return "1-0"

    def blob_text(self, digest: str) -> str | None:
        return self.blobs.get(digest)


def execute(
    state: RecordingState,
    tool: str,
    params: dict[str, Any],
    *,
    refs: dict[str, ValueRef] | None = None,
    limits: ValueLimits | None = None,
) -> dict[str, Any]:
    executor = StepExecutor(cast(HotState, state), TOOLS, MemoryEffectLedger(), "w1", limits=limits)
    args = StepTaskArgs(
        session_id="s1",
        step_id="big",
        attempt=1,
        epoch=1,
        tool=tool,
        params=params,
        param_refs=refs or {},
        timeout_s=10,
        idempotency_key="s1:big",
    )
    executor.execute(args)
    return state.outcomes[-1]


def test_an_output_above_the_hard_limit_fails_for_good_and_is_not_stored() -> None:
    state = RecordingState()
    outcome = execute(
        state, "bench.sleep", {"payload_bytes": 5_000}, limits=ValueLimits(1_000, 4_000)
    )
    assert outcome["status"] == "failed"
    assert outcome["error_kind"] == "permanent"
    assert outcome["output"] is None
    assert not outcome["output_json"]
    size = len(encode({"attempt": 1, "payload": "x" * 5_000, "slept": 0.0}))
    assert outcome["error"] == (
        f"OutputTooLarge: step 'big': its output is {size:,} bytes of JSON, above the limit "
        "of 4,000 bytes; make the tool return less (store the data elsewhere and pass a "
        "link), or raise PLANLOOP_VALUE_MAX_BYTES"
    )


def test_an_output_within_the_limit_is_encoded_once_for_the_store() -> None:
    state = RecordingState()
    outcome = execute(state, "bench.echo", {"value": "y" * 3_000}, limits=ValueLimits(10, 4_000))
    assert outcome["status"] == "completed"
    assert outcome["output_json"] == encode({"value": "y" * 3_000})


def test_a_param_sent_by_reference_is_read_back_at_its_path() -> None:
    stored = encode({"attempt": 1, "payload": "x" * 100, "rows": [{"n": 7}]})
    digest = blob_digest(stored)
    state = RecordingState({digest: stored})
    refs = {"value": ValueRef(digest=digest, path=["rows", "0"], size=7)}
    outcome = execute(state, "bench.echo", {}, refs=refs)
    assert outcome["status"] == "completed"
    assert json.loads(outcome["output_json"]) == {"value": {"n": 7}}


def test_a_param_gone_from_redis_is_a_transient_failure() -> None:
    refs = {"value": ValueRef(digest="a" * 64, size=100_000)}
    outcome = execute(RecordingState(), "bench.echo", {}, refs=refs)
    assert outcome["status"] == "failed"
    assert outcome["error_kind"] == "transient"
    assert "param 'value'" in outcome["error"]


def test_a_param_above_the_hard_limit_fails_for_good_without_being_read() -> None:
    refs = {"value": ValueRef(digest="a" * 64, size=20_000)}
    outcome = execute(RecordingState(), "bench.echo", {}, refs=refs, limits=ValueLimits(10, 9_999))
    assert outcome["error_kind"] == "permanent"
    assert "OutputTooLarge: step 'big': its param 'value' is 20,000 bytes" in outcome["error"]


def test_output_too_large_is_permanent_and_carries_its_figures() -> None:
    exc = OutputTooLarge("s", "output", size=20, limit=10)
    assert isinstance(exc, PermanentToolError)
    assert (exc.step_id, exc.what, exc.size, exc.limit) == ("s", "output", 20, 10)


def test_walk_follows_keys_and_list_indexes() -> None:
    value = {"a": [{"b": 1}, {"b": 2}]}
    assert walk(value, ["a", "1", "b"]) == 2
    assert walk(value, []) == value
    with pytest.raises(KeyError):
        walk(value, ["a", "2"])


def test_a_big_value_is_previewed_with_its_size_and_masked() -> None:
    small = {"token": "S1", "n": 1}
    assert preview(small) == {"token": "***", "n": 1}
    big = {"api_key": "S2", "text": "x" * (PREVIEW_CHARS * 3)}
    shown = preview(big)
    assert shown["truncated"] is True
    assert shown["bytes"] == len(encode(big))
    assert len(shown["preview"]) < PREVIEW_CHARS + 10  # the start, masked
    assert "S2" not in json.dumps(shown)
    assert preview(None) is None


def test_a_prompt_shows_a_big_output_as_a_preview_with_its_size() -> None:
    big = {"rows": 3, "payload": "x" * 200_000}
    situation = Situation(
        goal="g",
        constraints=(),
        steps=(StepView("big", "bench.sleep", "", "completed", 1, output=big),),
        events=(),
        replans_used=0,
        max_replans=3,
        trigger="t",
        preview_above_bytes=64 * 1024,
    )
    text = render_situation(situation, budget_chars=6_000)
    assert f"{len(encode(big))}" in text
    assert '"truncated":true' in text
    assert len(text) < 6_000


def test_show_puts_a_big_outputs_size_first() -> None:
    cell = output_cell({"truncated": True, "bytes": 1_048_600, "preview": '{"payload":"xx'})
    assert cell == '(1,048,600 bytes) {"payload":"xx'
    assert output_cell({"n": 1}) == '{"n":1}'
    assert output_cell(None) == ""


def test_the_inline_limit_may_not_exceed_the_hard_limit() -> None:
    with pytest.raises(ValidationError, match="inline_value_max_bytes must not exceed"):
        Settings(inline_value_max_bytes=2_000, value_max_bytes=1_000)
    limits = ValueLimits.from_settings(Settings())
    assert (limits.inline_max_bytes, limits.max_bytes) == (64 * 1024, 16 * 1024 * 1024)
