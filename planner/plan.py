"""The plan schema (a DAG of tool-calling steps) and loading it from YAML or JSON."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import PlanLoadError, PlanValidationError

STEP_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"

ExpectOp = Literal[
    "exists", "truthy", "eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "len_ge", "len_le"
]


class Compensation(BaseModel):
    """The tool call that undoes a completed step when the session aborts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    params: dict[str, Any] = Field(default_factory=dict)


class Expectation(BaseModel):
    """One check on a step's output; a miss is TASK_UNEXPECTED_RESULT."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field("", description='Dotted path into the output ("" = whole output).')
    op: ExpectOp = "exists"
    value: Any = None


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
        None, gt=0, description="Seconds; None = the tool's default, then the settings default."
    )
    critical: bool = False
    compensate: Compensation | None = None
    requires_approval: bool = False
    phase: str | None = None
    expect: list[Expectation] = Field(default_factory=list)
    fallback: list[Step] = Field(
        default_factory=list,
        description="Sub-graph the rule policy injects when this step fails for good.",
    )

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


def load_plan(source: str | Path) -> Plan:
    """Read a plan from a ``.yaml``, ``.yml`` or ``.json`` file.

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
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanLoadError("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanLoadError(f"cannot read the file: {exc}", source=str(path)) from exc
    return parse_plan(text, fmt="json" if suffix == ".json" else "yaml", source=str(path))


def parse_plan(
    text: str, *, fmt: Literal["yaml", "json"] = "yaml", source: str | None = None
) -> Plan:
    """Parse a plan document; ``source`` names it in error messages.

    Raises:
        PlanLoadError: the text is malformed or does not fit the schema.
    """
    data = _parse_json(text, source) if fmt == "json" else _parse_yaml(text, source)
    if not isinstance(data, dict):
        raise PlanLoadError(
            f"a plan must be a mapping with a 'steps' list, got {type(data).__name__}",
            source=source,
        )
    try:
        return Plan.model_validate(data)
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
        items.append(f"{loc}: {error['msg']}" if loc else str(error["msg"]))
    return "; ".join(items)


def _parse_yaml(text: str, source: str | None) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PlanLoadError(f"bad YAML{where}: {problem}", source=source) from None


def _parse_json(text: str, source: str | None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanLoadError(
            f"bad JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=source
        ) from None
