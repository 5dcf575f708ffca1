"""Statuses, event types and the payloads that cross process boundaries."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planloop.core.errors import StoredSessionError
from planloop.core.masking import validation_summary
from planloop.core.secret_shapes import mask_known
from planloop.core.values import ValueRef


class StepStatus(StrEnum):
    """Where one step of a plan stands."""

    PENDING = "pending"  # waiting for its dependencies
    READY = "ready"  # dependencies done; waiting for a slot or a retry back-off
    RUNNING = "running"  # an attempt was dispatched to the worker pool
    COMPLETED = "completed"  # the latest attempt succeeded; never executed again
    FAILED = "failed"  # failed for good (retry budget spent or permanent error)
    INTERRUPTED = "interrupted"  # timed out, lost with its worker, or cut short
    SKIPPED = "skipped"  # not run because a dependency failed or was skipped
    CANCELLED = "cancelled"  # cancelled by a user, an abort or a re-plan

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_STEP


_TERMINAL_STEP = frozenset(
    {StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.CANCELLED}
)


class SessionStatus(StrEnum):
    """Where a session stands."""

    PENDING = "pending"  # submitted, no supervisor has taken it yet
    RUNNING = "running"  # a supervisor owns it and drives its steps
    COMPLETED = "completed"  # every step completed (or was skipped without harm)
    FAILED = "failed"  # a critical step failed for good
    ABORTED = "aborted"  # the decision policy gave up; compensations ran
    CANCELLED = "cancelled"  # a user cancelled it; compensations ran

    @property
    def ended(self) -> bool:
        return self not in (SessionStatus.PENDING, SessionStatus.RUNNING)


class EventType(StrEnum):
    """Context-change events on a session's stream."""

    TASK_COMPLETED = "TASK_COMPLETED"  # an attempt finished with an output
    TASK_FAILED = "TASK_FAILED"  # an attempt raised
    TASK_INTERRUPTED = "TASK_INTERRUPTED"  # timeout, worker lost, cancelled, tool unavailable
    TASK_UNEXPECTED_RESULT = "TASK_UNEXPECTED_RESULT"  # output missed the step's `expect`
    NEW_CONSTRAINT = "NEW_CONSTRAINT"  # the user added a constraint mid-run
    DEPENDENCY_BROKEN = "DEPENDENCY_BROKEN"  # a dependency was skipped or cancelled
    EXTERNAL_SIGNAL = "EXTERNAL_SIGNAL"  # a user signal or command (cancel, approve)
    MILESTONE_REACHED = "MILESTONE_REACHED"  # a declared phase finished


class Severity(StrEnum):
    """How urgently an event asks for a decision."""

    INFO = "INFO"  # record only
    WARNING = "WARNING"  # react in batches
    CRITICAL = "CRITICAL"  # react at once

    @property
    def rank(self) -> int:
        return {"INFO": 0, "WARNING": 1, "CRITICAL": 2}[self.value]


class ErrorKind(StrEnum):
    """How a failed attempt failed; decides whether a retry can help."""

    TRANSIENT = "transient"  # retry
    PERMANENT = "permanent"  # retrying cannot help
    TIMEOUT = "timeout"  # ran past its timeout; retry
    LOST = "lost"  # worker vanished; retry
    UNAVAILABLE = "unavailable"  # the tool's circuit breaker is open
    UNSERVED = "unserved"  # no live worker serves the tool (or the one that took it does not)
    STALLED = "stalled"  # an agent step's loop stopped making progress; the same loop would too
    STORE = "store"  # the effect ledger or SQL record refused a write: retried once it recovers


# The kinds a retry can help with: the supervisor retries them within the step's budget.
RETRYABLE = frozenset({ErrorKind.TRANSIENT, ErrorKind.TIMEOUT, ErrorKind.LOST})


class Event(BaseModel):
    """A context-change event, as stored in ``pl:s:{sid}:events``."""

    model_config = ConfigDict(frozen=True)

    type: EventType
    severity: Severity = Severity.INFO
    step_id: str = ""
    attempt: int = 0
    description: str = ""
    payload: dict[str, Any] = Field(default_factory=dict)
    # Finite: the SQL record (JSON, timestamps) refuses NaN and infinity.
    occurred_at: float = Field(default_factory=time.time, allow_inf_nan=False)
    # Who asked for it: a console user, a CLI/SDK caller's OS user or `--as` name; "" for
    # what the system itself reports (outcomes, notices).
    actor: str = ""

    def to_fields(self) -> dict[str, str]:
        """Flat string fields for XADD (``actor`` only when there is one: outcomes, the
        bulk of the stream, carry none). The deployment's known secret values
        (core/known_secrets.py) never reach the stream: its readers show it as stored."""
        fields = {
            "type": self.type.value,
            "severity": self.severity.value,
            "step_id": self.step_id,
            "attempt": str(self.attempt),
            "description": mask_known(self.description),
            "payload": mask_known(json.dumps(self.payload, separators=(",", ":"), default=str)),
            "occurred_at": repr(self.occurred_at),
        }
        if self.actor:
            fields["actor"] = self.actor
        return fields

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Event:
        """Parse the flat fields XREAD returns."""
        return cls(
            type=EventType(fields["type"]),
            severity=Severity(fields.get("severity", "INFO")),
            step_id=fields.get("step_id", ""),
            attempt=int(fields.get("attempt") or 0),
            description=fields.get("description", ""),
            payload=json.loads(fields.get("payload") or "{}"),
            occurred_at=float(fields.get("occurred_at") or 0.0),
            actor=fields.get("actor", ""),
        )


class StepState(BaseModel):
    """The hot state of one step, as stored in ``pl:s:{sid}:step:{id}``."""

    status: StepStatus = StepStatus.PENDING
    attempt: int = 0
    epoch: int = 0
    task_id: str = ""
    worker: str = ""
    dispatched_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    not_before: float = 0.0
    error: str = ""
    error_kind: str = ""
    output_ref: str = ""
    note: str = ""
    resent: int = 0  # the attempt whose second copy the watchdog queued (one per attempt)
    queue: str = ""  # the queue its attempt was sent to (core/routing.py); "": the base queue
    requested_by: str = ""  # who approved or retried it, for its next attempt's task args
    store_faults: int = 0  # attempts that failed on the store (they use no retry budget)

    def to_fields(self) -> dict[str, str]:
        # The fields' own dict: iterating the model itself costs several times more, and
        # every dispatch writes each step's fields.
        # requested_by and store_faults only once set: most steps never have one
        return {
            k: str(v.value if isinstance(v, StrEnum) else v)
            for k, v in self.__dict__.items()
            if v or k not in ("requested_by", "store_faults")
        }

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> StepState:
        return cls.model_validate({k: v for k, v in fields.items() if k in cls.model_fields})


class StepTaskArgs(BaseModel):
    """The JSON arguments of one ``planloop.step`` Celery task: one attempt of one step."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    step_id: str
    attempt: int
    epoch: int
    tool: str
    params: dict[str, Any]
    timeout_s: float
    idempotency_key: str
    critical: bool = False
    expect: list[dict[str, Any]] = Field(default_factory=list)
    # Params too big to travel inline (core/values.py): the worker reads them before the call.
    param_refs: dict[str, ValueRef] = Field(default_factory=dict)
    instruction: str = ""  # an agent step's instruction (planner/react_step.py)
    # The step's retry budget: the worker tells Celery (and Flower) whether a failed attempt
    # will be retried; the supervisor decides that on its own, by the same rule.
    max_retries: int = 0
    # When the supervisor queued the attempt (epoch seconds; 0: unknown): the worker's
    # dispatch-overhead histogram (core/metrics.py).
    dispatched_at: float = 0.0
    # The queue the attempt is sent to (core/routing.py); "": the base queue (Settings.queue).
    queue: str = ""
    # Who approved or retried the step, when a person did (Flower shows it with the args).
    requested_by: str = ""

    @property
    def task_id(self) -> str:
        return task_id(self.session_id, self.step_id, self.attempt)

    def wire(self) -> dict[str, Any]:
        """The task's argument as it is queued (JSON-ready): the fields left at their
        defaults stay out, since :meth:`model_validate` reads the same attempt back without
        them, and the message crosses the wire twice (queued, then popped)."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def retried_after(self, error_kind: str) -> bool:
        """Whether the supervisor retries this attempt when it fails with ``error_kind``
        (session/policy.py decide_failure, the same rule; store faults: outside the budget)."""
        store = error_kind == ErrorKind.STORE
        return store or (error_kind in RETRYABLE and self.attempt <= self.max_retries)


def task_id(session_id: str, step_id: str, attempt: int) -> str:
    """The deterministic Celery task id of one attempt."""
    return f"{session_id}:{step_id}:{attempt}"


def idempotency_key(session_id: str, step_id: str, redo: int = 0) -> str:
    """The idempotency key of a step's writes: the same for every attempt, so the effect
    ledger (core/effects.py) applies each write once. ``redo``: how many times a continue
    redid the write after its compensation (``SessionRecord.redone``), a new effect each."""
    return f"{session_id}:{step_id}" if not redo else f"{session_id}:{step_id}:redo{redo}"


class SessionOptions(BaseModel):
    """Per-session knobs a submitter may set; unset ones fall back to the settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Upper bounds: the CLI's options take theirs from here (producer/cli/options.py), so
    # every entry point accepts the same values; each is far above any real use.
    concurrency: int | None = Field(None, ge=1, le=10_000, description="Steps running at once.")
    max_replans: int | None = Field(None, ge=0, le=1_000, description="Re-plan budget.")
    batch_react_size: int | None = Field(None, ge=1, le=10_000, description="WARNING batch size.")
    deadline_s: float | None = Field(
        None, gt=0, le=1e9, allow_inf_nan=False, description="Session deadline, seconds."
    )
    max_tokens: int | None = Field(
        None, ge=1, le=10**12, description="LLM token budget, every role."
    )
    max_cost_usd: float | None = Field(
        None, gt=0, le=1e9, allow_inf_nan=False, description="LLM cost budget, US dollars."
    )
    tools: list[str] = Field(
        default_factory=list, max_length=1_000, description="Toolset prefixes for planning."
    )
    compensate_on_failure: bool = Field(
        True, description="A session that ends failed undoes its completed writes."
    )
    milestone_reviews: bool | None = Field(
        None, description="Review the plan (LLM) when a declared phase finishes."
    )
    max_rounds: int | None = Field(None, ge=1, le=1_000, description="Rounds with critique (LLM).")
    answer_schema: dict[str, Any] | None = Field(
        None, description="JSON schema the final answer's data must fit (LLM)."
    )
    mode: Literal["plan", "react", "auto"] = Field(
        "auto",
        description="How a goal runs: a plan, one agent step, or as the router decides.",
    )


def json_field(sid: str, fields: Mapping[str, str], name: str) -> Any:
    """The JSON of session ``sid``'s field ``name`` (None when absent or empty).

    Raises:
        StoredSessionError: it is not JSON (its value is not shown).
    """
    raw = fields.get(name)
    if not raw:
        return None
    try:
        # NaN and Infinity in options are what every entry point refuses; elsewhere (a
        # report, the deliberation) Planloop's own writes, read as written
        return (
            json.loads(raw, parse_constant=_no_constant) if name == "options" else json.loads(raw)
        )
    except ValueError as exc:
        raise StoredSessionError(sid, f"{name}: not JSON ({type(exc).__name__})") from None
    except RecursionError:
        raise StoredSessionError(sid, f"{name}: nested too deep to read") from None


def _loads_alone(model: type[SessionRecord], sid: str, name: str, value: str) -> bool:
    try:
        model.from_fields(sid, {name: value})
    except StoredSessionError:
        return False
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class SessionRecord(BaseModel):
    """The hot state of one session, as stored in ``pl:s:{sid}``."""

    id: str
    status: SessionStatus = SessionStatus.PENDING
    goal: str = ""
    plan_version: int = 1
    epoch: int = 0
    owner: str = ""
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    replans: int = 0
    rounds: int = 0  # rounds the critic sent back (the first plan is round 1)
    planning: str = ""  # "streaming": the first plan's reply had not ended (steps installed)
    error: str = ""
    awaiting: str = ""
    approved: list[str] = Field(default_factory=list)
    options: SessionOptions = Field(default_factory=SessionOptions)
    report: dict[str, Any] | None = None
    deliberation: dict[str, Any] = Field(default_factory=dict)
    # model -> [prompt tokens, completion tokens] spent by every LLM call so far
    llm_usage: dict[str, list[int]] = Field(default_factory=dict)
    # Lineage (producer/lineage.py): the session and plan version this one was forked
    # from, the states of the steps it carried over (step id -> StepState fields), how many
    # times it was continued, and the writes a continue redoes (step id -> generation).
    forked_from: str = ""
    forked_version: int = 0
    carried: dict[str, dict[str, str]] = Field(default_factory=dict)
    continued: int = 0
    redone: dict[str, int] = Field(default_factory=dict)

    @property
    def answer(self) -> dict[str, Any] | None:
        """The final answer (``text``, ``data``) of an ended session with an LLM, or None."""
        found = (self.report or {}).get("answer")
        return found if isinstance(found, dict) else None

    @classmethod
    def from_fields(cls, sid: str, fields: dict[str, str]) -> SessionRecord:
        """The session hash ``fields`` as a record.

        Raises:
            StoredSessionError: a field does not parse or breaks a limit every entry point
                enforces (written past the producer: an old client, a script); the message
                names the fields, never their values.
        """
        try:
            data: dict[str, Any] = {k: v for k, v in fields.items() if k in cls.model_fields}
            data["id"] = sid
            for name in ("options", "deliberation", "llm_usage", "carried", "redone"):
                data[name] = json_field(sid, fields, name) or {}
            data["approved"] = json_field(sid, fields, "approved") or []
            data["report"] = json_field(sid, fields, "report")
            return cls.model_validate(data)
        except ValidationError as exc:
            raise StoredSessionError(sid, validation_summary(exc)) from None
        except RecursionError:  # a JSON field parsed, but too deep for the model
            raise StoredSessionError(sid, "a field is nested too deep to read") from None

    @classmethod
    def readable(cls, sid: str, fields: dict[str, str]) -> SessionRecord:
        """The session hash as far as it can be read, for views (a list, ``status``,
        ``show``): a field that does not load is left at its default, and a session whose
        error does not already say so is described by the :class:`StoredSessionError`.

        A hash written past the producer stays in Redis after the supervisor ended it
        failed; one such session must not take the whole list down with it.
        """
        try:
            return cls.from_fields(sid, fields)
        except StoredSessionError as exc:
            refused = str(exc)
        kept = {
            name: value
            for name, value in fields.items()
            if name in cls.model_fields and _loads_alone(cls, sid, name, value)
        }
        try:
            record = cls.from_fields(sid, kept)
        except StoredSessionError:  # fields that load alone but not together
            record = cls(id=sid)
        return record if record.error else record.model_copy(update={"error": refused})
