"""Sending a step's resolved params: small ones inline, big ones by reference.

A param whose JSON is above ``inline_value_max_bytes`` stays out of the task message (which
Redis would hold in the queue, then in the broker's unacked hash, once per attempt). A param
that is exactly one ``{{step.output.path}}`` reference points into that step's stored output,
so the value exists once in Redis however many steps take it; any other big param (a big
value inside text or inside a larger structure) is stored once under its own digest. Either
way the stored copy is made sure of right before the dispatch (its TTL renewed, or written
back from the output in memory when it expired), so the worker finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from planloop.core.hot_state import blob_digest
from planloop.core.models import StepState
from planloop.core.values import ValueLimits, ValueRef, encode
from planloop.planner.plan import Step
from planloop.planner.references import REFERENCE
from planloop.supervisor.io.store_port import SessionStorePort


@dataclass(frozen=True)
class SentParams:
    """A step's resolved params as its task message carries them."""

    inline: dict[str, Any]
    refs: dict[str, ValueRef] = field(default_factory=dict)


async def send_params(
    store: SessionStorePort,
    step: Step,
    params: dict[str, Any],
    *,
    states: Mapping[str, StepState],
    outputs: Mapping[str, Any],
    limits: ValueLimits,
    ttl_s: float,
) -> SentParams:
    """Split ``params`` (resolved) into inline values and references to stored copies.

    A value above ``limits.max_bytes`` is sent as a reference that is never stored: the
    worker fails the step with OutputTooLarge without reading it.
    """
    inline: dict[str, Any] = {}
    refs: dict[str, ValueRef] = {}
    needed: dict[str, Callable[[], str]] = {}  # digest -> its JSON text, encoded on demand
    for name, value in params.items():
        text = encode(value)
        if len(text) <= limits.inline_max_bytes:
            inline[name] = value
            continue
        pointer = _into_output(step.params.get(name), states, outputs)
        if pointer is not None:
            ref = ValueRef(digest=pointer[0], path=pointer[1], size=len(text))
            content = partial(encode, outputs[pointer[2]])
        else:
            ref, content = ValueRef(digest=blob_digest(text), size=len(text)), partial(str, text)
        refs[name] = ref
        if ref.size <= limits.max_bytes:
            needed[ref.digest] = content
    await store.keep_blobs(needed, ttl_s=ttl_s)
    return SentParams(inline, refs)


def _into_output(
    raw: Any, states: Mapping[str, StepState], outputs: Mapping[str, Any]
) -> tuple[str, list[str], str] | None:
    """(digest, path, step) when the raw param is one whole reference to a stored output."""
    if not isinstance(raw, str):
        return None
    match = REFERENCE.fullmatch(raw.strip())
    if match is None:
        return None
    step_id = match.group(1)
    st = states.get(step_id)
    if st is None or not st.output_ref or step_id not in outputs:
        return None
    return st.output_ref, match.group(2).split(".")[1:], step_id
