"""The plan schema (a DAG of tool-calling steps) and loading it from YAML or JSON."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from planloop.core import json_input
from planloop.core.errors import PlanLoadError, PlanValidationError
from planloop.core.input_limits import DEFAULTS, InputLimits, clean, value_problem
from planloop.planner.plan_limits import (
    DOCUMENT_CLEAN,
    PARAMS_LEVEL,
    check_step,
    checked_before,
    limits_of,
    within_limits,
)
from planloop.planner.safe_yaml import YamlLimitError, load_yaml

# A queue name: a Redis key kombu makes from it, and a Prometheus label value.
QUEUE_PATTERN = r"^[A-Za-z0-9_.:+-]+$"
STEP_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"

ExpectOp = Literal[
    "exists", "truthy", "eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "len_ge", "len_le"
]


class Compensation(BaseModel):
    """The tool call that undoes a completed step when the session aborts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params", mode="before")
    @classmethod
    def _params_within_limits(cls, value: Any, info: ValidationInfo) -> Any:
        return within_limits(value, info, "compensate.params")


class Expectation(BaseModel):
    """One check on a step's output; a miss is TASK_UNEXPECTED_RESULT."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field("", description='Dotted path into the output ("" = whole output).')
    op: ExpectOp = "exists"
    value: Any = None

    @field_validator("value", mode="before")
    @classmethod
    def _value_within_limits(cls, value: Any, info: ValidationInfo) -> Any:
        return within_limits(value, info, "value")


class Step(BaseModel):
    """One node of the plan: a tool call with its dependencies and policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=STEP_ID_PATTERN, max_length=64)
    title: str = ""
    instruction: str = ""
    tool: str
    params: dict[str, Any] = Field(default_factory=dict)
    dependencies: list[str] = Field(default_factory=list)
    max_retries: int | None = Field(None, ge=0, description="None = the settings default.")
    timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds; None = the tool's default, then the settings default; "
        "at most max_step_timeout_s.",
    )
    critical: bool = False
    compensate: Compensation | None = None
    requires_approval: bool = False
    phase: str | None = None
    queue: str | None = Field(
        None,
        pattern=QUEUE_PATTERN,
        max_length=128,
        description="The worker queue (pool) to send this step to, whether or not a live "
        "worker consumes it (what other plan formats call assignedWorker); None = routed to a "
        "live worker that serves the tool (core/routing.py).",
    )
    expect: list[Expectation] = Field(default_factory=list)
    fallback: list[Step] = Field(
        default_factory=list,
        description="Sub-graph the rule policy injects when this step fails for good.",
    )

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any, info: ValidationInfo) -> Any:
        """Texts, params, timeout and fallback nesting within the limits, naming the step."""
        if not isinstance(data, dict):
            return data  # a Step already built, or garbage pydantic reports itself
        check_step(data, limits_of(info), texts_checked=DOCUMENT_CLEAN.get())
        return data

    @field_validator("timeout_s")
    @classmethod
    def _timeout_within_limit(cls, value: float | None, info: ValidationInfo) -> float | None:
        limit = limits_of(info).max_step_timeout_s
        if value is not None and value > limit:
            raise PydanticCustomError(
                "plan_limit",
                "step {step}: timeout_s {value} s is above the limit of {limit} s "
                "(max_step_timeout_s)",
                {"step": repr(info.data.get("id")), "value": f"{value:g}", "limit": f"{limit:g}"},
            )
        return value

    def canonical(self) -> dict[str, Any]:
        """JSON-ready data with dependencies and fallback ids sorted (for fingerprints)."""
        data = self.model_dump(mode="json")
        data["dependencies"] = sorted(self.dependencies)
        data["fallback"] = [s.canonical() for s in sorted(self.fallback, key=lambda s: s.id)]
        return data


class Plan(BaseModel):
    """A goal and the DAG of steps that reaches it. Immutable once stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = ""
    steps: list[Step] = Field(min_length=1)
    constraints: list[str] = Field(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _within_limits(
        cls, data: Any, handler: ModelWrapValidatorHandler[Plan], info: ValidationInfo
    ) -> Plan:
        """Goal and constraints within the limits; the steps in one walk when they pass.

        The walk gives every container the budget of a main step's params, so a document
        that passes it keeps every limit (deeper parts get less than they are allowed);
        one that does not is checked step by step, which names the culprit.
        """
        if not isinstance(data, dict):
            return handler(data)
        if checked_before(info):  # validated under the limits before it was stored
            token = DOCUMENT_CLEAN.set(True)
            try:
                return handler(data)
            finally:
                DOCUMENT_CLEAN.reset(token)
        texts = {"goal": data.get("goal", ""), "constraints": data.get("constraints", [])}
        problem = value_problem(texts, max_depth=2)
        if problem:
            raise PydanticCustomError("plan_limit", "{problem}", {"problem": problem})
        steps = data.get("steps")
        raw = isinstance(steps, list) and bool(steps) and isinstance(steps[0], dict)
        if not raw or not clean([(data, limits_of(info).max_nesting_depth + PARAMS_LEVEL)]):
            return handler(data)  # built steps are not checked again; raw ones one by one
        token = DOCUMENT_CLEAN.set(True)
        try:
            return handler(data)
        finally:
            DOCUMENT_CLEAN.reset(token)

    @property
    def step_ids(self) -> list[str]:
        """Ids of the main steps, in plan order (fallback steps are not included)."""
        return [s.id for s in self.steps]

    @property
    def by_id(self) -> dict[str, Step]:
        """Main steps by id."""
        return {s.id: s for s in self.steps}

    def step(self, step_id: str) -> Step:
        """The step called ``step_id``.

        Raises:
            PlanValidationError: no step has that id.
        """
        for s in self.steps:
            if s.id == step_id:
                return s
        raise PlanValidationError(
            f"no step {step_id!r} in the plan (steps: {', '.join(self.step_ids)})",
            step_id=step_id,
        )

    def fingerprint(self) -> str:
        """sha256 of the steps, insensitive to step and dependency order."""
        steps = [s.canonical() for s in sorted(self.steps, key=lambda s: s.id)]
        text = json.dumps(steps, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> str:
        """The plan as compact JSON, readable back with :func:`parse_plan` (``fmt="json"``)."""
        return self.model_dump_json()


def load_plan(source: str | Path, *, limits: InputLimits = DEFAULTS) -> Plan:
    """Read a plan from a ``.yaml``, ``.yml`` or ``.json`` file, within ``limits``.

    Raises:
        PlanLoadError: the file is missing, unreadable, malformed or does not fit the schema.
    """
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise PlanLoadError(
            f"unsupported plan file type {suffix or '(none)'!r}; use .yaml, .yml or .json",
            source=str(path),
        )
    try:
        size = path.stat().st_size
        if limits.max_input_bytes is not None and size > limits.max_input_bytes:
            raise PlanLoadError(
                f"the file has {size} bytes, above the limit of {limits.max_input_bytes} "
                "(max_input_bytes)",
                source=str(path),
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanLoadError("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanLoadError(f"cannot read the file: {exc}", source=str(path)) from exc
    fmt: Literal["yaml", "json"] = "json" if suffix == ".json" else "yaml"
    return parse_plan(text, fmt=fmt, source=str(path), limits=limits)


def parse_plan(
    text: str,
    *,
    fmt: Literal["yaml", "json"] = "yaml",
    source: str | None = None,
    limits: InputLimits = DEFAULTS,
) -> Plan:
    """Parse a plan document within ``limits``; ``source`` names it in error messages.

    Raises:
        PlanLoadError: the text is malformed, too large, or does not fit the schema.
    """
    budget = limits.max_input_bytes
    if budget is not None and len(text) > budget // 4 and len(text.encode()) > budget:
        raise PlanLoadError(
            f"the plan has {len(text.encode())} bytes, above the limit of {budget} "
            "(max_input_bytes)",
            source=source,
        )
    try:
        data = (
            _parse_json(text, source)
            if fmt == "json"
            else _parse_yaml(text, source, limits.max_yaml_alias_nodes)
        )
    except RecursionError:
        raise PlanLoadError(
            f"the plan is nested too deeply to read (params may nest at most "
            f"{limits.max_nesting_depth} levels)",
            source=source,
        ) from None
    if not isinstance(data, dict):
        raise PlanLoadError(
            f"a plan must be a mapping with a 'steps' list, got {type(data).__name__}",
            source=source,
        )
    try:
        return Plan.model_validate(data, context={"limits": limits})
    except ValidationError as exc:
        raise PlanLoadError(
            f"plan does not fit the schema: {describe(exc)}", source=source
        ) from None


def describe(exc: ValidationError) -> str:
    """A pydantic error as ``loc: msg`` items joined by ``; `` (``steps.2.tool: Field required``).

    Returns:
        The readable text, never the raw pydantic dump.
    """
    items = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"])
        if error["type"] == "plan_limit":
            loc = ""  # the message names the step and the path itself
        items.append(f"{loc}: {error['msg']}" if loc else str(error["msg"]))
    return "; ".join(items)


def _parse_yaml(text: str, source: str | None, max_alias_nodes: int | None) -> Any:
    try:
        return load_yaml(text, max_alias_nodes=max_alias_nodes)
    except YamlLimitError as exc:
        where = f" at line {exc.line}" if exc.line else ""
        raise PlanLoadError(f"bad YAML{where}: {exc}", source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PlanLoadError(f"bad YAML{where}: {problem}", source=source) from None
    except ValueError as exc:  # a scalar its constructor refuses (a date that is none, ...)
        raise PlanLoadError(f"bad YAML: a value cannot be read ({exc})", source=source) from None


def _parse_json(text: str, source: str | None) -> Any:
    try:
        return json_input.loads(text)
    except json_input.JsonInputError as exc:
        raise PlanLoadError(str(exc), source=source) from None


def load_stored_plan(raw: str, *, checked: bool = False) -> Plan:
    """A stored plan version. ``checked``: this very text was validated under the input
    limits before it was stored (``core.hot_state.plan_checked``): the limits' walk is
    skipped, the schema is not."""
    return Plan.model_validate_json(raw, context={"checked": True} if checked else None)
