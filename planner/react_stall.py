"""Stall detection for the ReAct loop: a loop that stopped making progress ends.

Two rules, each over the newest turns of the loop, each with its own threshold
(``PLANLOOP_REACT_STALL_REPEATS``, ``PLANLOOP_REACT_STALL_REFUSALS``; 0 turns a rule off):

* **repeated** — the last N turns made the same call (same tool, same params) and got the same
  observation (same ok flag and the same output, or the same error). A call counts only
  with its result: calling a tool again *is* progress when its answer changed (a queue
  draining, a job finishing), and two different calls that answer alike (``{}``, "not found")
  are a model exploring, not a loop. The whole observation is compared, not the text the
  model reads, which is cut at ``OBSERVATION_CHARS``: two long outputs that differ past the
  cut are different results.
* **refused** — the last N turns were tool calls refused before the tool ran: a tool the step
  may not use (unknown, or not in its ``tools``), or params that do not fit the tool's
  schema. The tools and params may differ from turn to turn; what repeats is that nothing
  runs. A call that ran (even one that failed) breaks the streak.

Refusals are checked first: three calls of the same unknown tool are "refused", the more
useful thing to tell. Pure logic over :class:`planner.react.Iteration`; nothing here runs
anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planloop.core.errors import AgentStepStalled
from planloop.core.masking import mask

if TYPE_CHECKING:
    from planloop.planner.react import Iteration

CALL_CHARS = 200  # of the repeated call (tool and params) named in the stall error
DETAIL_CHARS = 200  # of the repeated observation or the last refusal named in it


@dataclass(frozen=True)
class StallRules:
    """How many turns in a row make a stall (0: the rule is off)."""

    repeats: int = 3  # identical calls with identical observations
    refusals: int = 3  # refused tool calls


def find_stall(
    step_id: str, turns: Sequence[Iteration], rules: StallRules
) -> AgentStepStalled | None:
    """The stall the newest of ``turns`` complete, or None while the loop makes progress.

    Args:
        step_id: The agent step, named in the error.
        turns: The loop's finished turns, oldest first (a turn without an observation, the
            final answer or an unrun last call, ends every streak).
        rules: The thresholds.
    """
    observed = _observed_tail(turns)
    refused = _streak(observed, lambda it: bool(it.observation and it.observation.refused))
    if rules.refusals and refused >= rules.refusals:
        last = observed[-1]
        return AgentStepStalled(
            step_id,
            "refused",
            refused,
            _call(last),
            _clip(last.observation.error if last.observation else "", DETAIL_CHARS),
        )
    if rules.repeats and observed:
        newest = _signature(observed[-1])
        repeated = _streak(observed, lambda it: _signature(it) == newest)
        if repeated >= rules.repeats:
            last = observed[-1]
            seen = last.observation.text(DETAIL_CHARS) if last.observation else ""
            return AgentStepStalled(step_id, "repeated", repeated, _call(last), f"got {seen}")
    return None


def _observed_tail(turns: Sequence[Iteration]) -> list[Iteration]:
    """The newest turns that are tool calls with an observation, up to the first that is not."""
    tail: list[Iteration] = []
    for it in reversed(turns):
        if it.tool is None or it.observation is None:
            break
        tail.append(it)
    return tail[::-1]


def _streak(turns: list[Iteration], same: Callable[[Iteration], bool]) -> int:
    """How many of the newest ``turns`` in a row ``same`` holds for."""
    count = 0
    for it in reversed(turns):
        if not same(it):
            break
        count += 1
    return count


def _signature(it: Iteration) -> str:
    """The call and its whole result, as one comparable string (params' key order ignored)."""
    seen = it.observation
    result = None if seen is None else [seen.ok, seen.output, seen.error, seen.refused]
    return _json([it.tool, it.params, result])


def _call(it: Iteration) -> str:
    """``tool {params}`` as the error names it: masked, cut to ``CALL_CHARS``."""
    return _clip(f"{it.tool} {_json(mask(it.params))}", CALL_CHARS)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
