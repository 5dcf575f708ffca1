"""One step in full, for the console's step panel: the params as the worker got them
(resolved, masked), the output (a preview with its size; the whole value on demand; a big
one by reference), every attempt with its worker and times, the error and its kind, the
idempotency key with the effects the ledger recorded, and a compensation when one ran."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from planloop.core.errors import PlanloopError, SessionNotFoundError, StepNotFoundError
from planloop.core.masking import mask, mask_text
from planloop.core.models import StepState, idempotency_key
from planloop.core.values import encode, preview
from planloop.planner.plan import Plan, Step
from planloop.planner.references import find_references, resolve_params
from planloop.producer.client import Producer

PREVIEW_CHARS = 600  # the start of an output's JSON the panel shows before "show all"


@dataclass(frozen=True)
class StepRun:
    """What the hot state and the record know of one step's runs."""

    state: StepState
    attempts: list[dict[str, Any]]


def newest_definition(sid: str, plans: list[Plan], step_id: str) -> tuple[int, Step]:
    """The newest plan version holding ``step_id``, and the step there.

    Raises:
        StepNotFoundError: no version of the plan has that step.
    """
    for number in range(len(plans), 0, -1):
        step = plans[number - 1].by_id.get(step_id)
        if step is not None:
            return number, step
    raise StepNotFoundError(sid, step_id)


def runs_of(producer: Producer, sid: str, step_ids: list[str]) -> dict[str, StepRun]:
    """The live state (Redis; pending when gone) and recorded attempts (SQL) of steps."""
    states = producer.state.steps(sid, step_ids)
    recorded: dict[str, list[dict[str, Any]]] = {i: [] for i in step_ids}
    for row in producer.record.attempts(sid):
        if row.step_id in recorded:
            recorded[row.step_id].append(
                {
                    "attempt": row.attempt,
                    "status": row.status,
                    "worker": row.worker,
                    "dispatched_at": row.dispatched_at,
                    "started_at": row.started_at,
                    "finished_at": row.finished_at,
                    "error": row.error,
                    "error_kind": row.error_kind,
                    "output_ref": row.output_ref,
                }
            )
    return {i: StepRun(states[i], merge_attempts(states[i], recorded[i])) for i in step_ids}


def merge_attempts(state: StepState, recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded attempts with the live one (Redis is ahead of the last checkpoint)."""
    by_number = {a["attempt"]: a for a in recorded}
    if state.attempt:
        by_number[state.attempt] = {
            "attempt": state.attempt,
            "status": state.status.value,
            "worker": state.worker,
            "dispatched_at": state.dispatched_at,
            "started_at": state.started_at,
            "finished_at": state.finished_at,
            "error": state.error,
            "error_kind": state.error_kind,
            "output_ref": state.output_ref,
        }
    return [by_number[n] for n in sorted(by_number)]


def output_text(producer: Producer, sid: str, ref: str) -> str | None:
    """A stored output's JSON by its content address: Redis, else the SQL record."""
    if not ref:
        return None
    text = producer.state.blob_text(ref)
    return text if text is not None else producer.record.outputs(sid, [ref]).get(ref)


def latest_output_ref(run: StepRun) -> str:
    """The output of the step's newest attempt that left one."""
    refs = [a["output_ref"] for a in run.attempts if a.get("output_ref")]
    return refs[-1] if refs else run.state.output_ref


def resolved_params(
    producer: Producer, sid: str, step: Step, hidden: frozenset[str]
) -> tuple[Any, str]:
    """The params with their references resolved (masked), and why not when they cannot be
    yet (a dependency has no output)."""
    wanted = sorted(find_references(step.params))
    runs = runs_of(producer, sid, wanted) if wanted else {}
    outputs: dict[str, Any] = {}
    for dep, run in runs.items():
        text = output_text(producer, sid, latest_output_ref(run))
        if text is not None:
            outputs[dep] = json.loads(text)
    try:
        resolved = resolve_params(step.params, outputs, step_id=step.id)
    except PlanloopError as exc:
        return None, mask_text(str(exc))
    return preview(resolved, hidden, chars=PREVIEW_CHARS * 4), ""


def attempt_view(row: dict[str, Any]) -> dict[str, Any]:
    started, finished = row["started_at"], row["finished_at"]
    return {
        **{k: row[k] for k in ("attempt", "status", "worker", "dispatched_at", "error_kind")},
        "started_at": started,
        "finished_at": finished,
        "duration_s": round(finished - started, 3) if started and finished else None,
        "error": mask_text(row["error"] or ""),
    }


def output_view(
    producer: Producer, sid: str, step_id: str, ref: str, hidden: frozenset[str]
) -> dict[str, Any] | None:
    """A preview of the output with its size; a big one names its stored copy (``ref``),
    which ``/api/sessions/{sid}/steps/{step}/output`` returns whole."""
    text = output_text(producer, sid, ref)
    if text is None:
        return None
    value = json.loads(text)
    shown = preview(value, hidden, chars=PREVIEW_CHARS, ref=ref)
    whole = not (isinstance(shown, dict) and shown.get("truncated") is True)
    return {
        "bytes": len(encode(value)),
        "ref": ref,
        "complete": whole,
        "value": shown if whole else None,
        "preview": None if whole else shown["preview"],
        "url": f"/api/sessions/{sid}/steps/{step_id}/output",
    }


def effects_of(producer: Producer, sid: str, step_id: str) -> list[dict[str, Any]]:
    """The effects the ledger recorded for the step (its writes and their compensations)."""
    return [
        {
            "idempotency_key": mask_text(row.idempotency_key),
            "attempt": row.attempt,
            "tool": row.tool,
            "at": row.created_at,
            "receipt": mask(json.loads(row.receipt or "null")),
        }
        for row in producer.record.effects(sid)
        if row.step_id == step_id
    ]


def effects_origin(producer: Producer, sid: str, step_id: str) -> tuple[str, str, int]:
    """Whose key the step's writes went under: the parent's for a step a fork carried over,
    its own otherwise (with the generation of a write a continue redid)."""
    try:
        info = producer.session(sid)
    except SessionNotFoundError:  # only in the SQL record: no lineage to follow
        return sid, step_id, 0
    if step_id in info.carried and info.forked_from:
        return info.forked_from, step_id, 0
    return sid, step_id, info.redone.get(step_id, 0)


def step_detail(
    producer: Producer,
    sid: str,
    step_id: str,
    plans: list[Plan],
    report: dict[str, Any] | None,
    hidden: frozenset[str],
) -> dict[str, Any]:
    """Everything the step panel shows.

    Raises:
        StepNotFoundError: no plan version of the session has ``step_id``.
    """
    version, step = newest_definition(sid, plans, step_id)
    run = runs_of(producer, sid, [step_id])[step_id]
    params, unresolved = resolved_params(producer, sid, step, hidden)
    compensations = [
        c for c in (report or {}).get("compensations") or [] if c.get("step") == step_id
    ]
    # a step a fork carried over made its effects in its parent, under the parent's key
    origin = effects_origin(producer, sid, step_id)
    attempts = [attempt_view(a) for a in run.attempts]
    last = attempts[-1] if attempts else None
    return {
        "id": step_id,
        "title": mask_text(step.title),
        "tool": step.tool,
        "version": version,
        "in_latest": version == len(plans),
        "status": run.state.status.value
        if run.state.attempt
        else (last or {}).get("status", "pending"),
        "params": mask(step.params, hidden),
        "resolved_params": params,
        "unresolved": unresolved,
        "output": output_view(producer, sid, step_id, latest_output_ref(run), hidden),
        "error": (last or {}).get("error", ""),
        "error_kind": (last or {}).get("error_kind", ""),
        "attempts": attempts,
        "idempotency_key": idempotency_key(*origin),
        "effects": effects_of(producer, origin[0], step_id),
        "compensate": step.compensate.tool if step.compensate else None,
        "compensations": compensations,
        "note": mask_text(run.state.note),
    }


def full_output(
    producer: Producer, sid: str, step_id: str, plans: list[Plan], hidden: frozenset[str]
) -> Any:
    """The step's whole output, masked (None when it left none).

    Raises:
        StepNotFoundError: no plan version of the session has ``step_id``.
    """
    newest_definition(sid, plans, step_id)
    run = runs_of(producer, sid, [step_id])[step_id]
    text = output_text(producer, sid, latest_output_ref(run))
    return None if text is None else mask(json.loads(text), hidden)
