"""The ``@tool`` decorator, tool specs and the registry that workers, planner and CLI share.

A tool is a plain function ``(params, ctx) -> output`` with pydantic models for its params
and output. Registration happens at import; :func:`load_tools` imports every module named by
the ``planloop.tools`` entry-point group and by ``Settings.tool_modules``.
"""

from __future__ import annotations

import functools
import importlib
import json
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from planloop.core.effect_fence import AttemptFence
from planloop.core.errors import (
    PermanentToolError,
    ToolModuleError,
    ToolParamsError,
    TransientToolError,
    UnknownToolError,
)
from planloop.core.masking import validation_summary

ENTRY_POINT_GROUP = "planloop.tools"

SideEffect = Literal["read", "write"]

ParamError = tuple[tuple[str | int, ...], str]
"""Where params break a tool's schema (the path, first part the param's name) and why,
in words that never repeat the value (it may be a secret)."""


class EffectLedger(Protocol):
    """Where write tools record effects, keyed by idempotency key, so each happens once.

    ``make_receipt`` performs the effect and describes it; ``ctx`` (optional) says which
    attempt of which tool asks, for the record, and carries the attempt's fence: once the
    attempt timed out, the ledger refuses the effect (:class:`core.errors.LateEffectRefused`).
    The workers' ledger is :class:`core.effects.SqlEffectLedger` (durable, Redis in front as
    a cache).
    """

    def apply_once(
        self,
        idempotency_key: str,
        make_receipt: Callable[[], dict[str, Any]],
        ctx: ToolContext | None = None,
    ) -> dict[str, Any]:
        """Run ``make_receipt`` once per key and return the first receipt ever recorded."""
        ...


class MemoryEffectLedger:
    """In-memory :class:`EffectLedger` for unit tests and single-process runs."""

    def __init__(self) -> None:
        self.receipts: dict[str, dict[str, Any]] = {}
        self.counts: dict[str, int] = {}

    def apply_once(
        self,
        idempotency_key: str,
        make_receipt: Callable[[], dict[str, Any]],
        ctx: ToolContext | None = None,
    ) -> dict[str, Any]:
        if ctx is not None:
            ctx.fence.admit(idempotency_key)
        if idempotency_key not in self.receipts:
            if ctx is None:
                self.receipts[idempotency_key] = make_receipt()
            else:
                with ctx.fence.applying(idempotency_key):
                    self.receipts[idempotency_key] = make_receipt()
            self.counts[idempotency_key] = self.counts.get(idempotency_key, 0) + 1
        return self.receipts[idempotency_key]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the attempt it runs in."""

    session_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    effects: EffectLedger = field(default_factory=MemoryEffectLedger)
    tool: str = ""  # the running tool's name (ToolSpec.run fills it in)
    # Closed when the attempt's timeout passes: its effects are refused from then on
    # (core/effect_fence.py). The default is never closed (tools run outside a worker).
    fence: AttemptFence = field(default_factory=AttemptFence)


class Simulation(BaseModel):
    """Latency and failure injection the bundled tools honour (tests, demos, benchmarks)."""

    latency_s: float = Field(0.0, ge=0, description="Seconds to sleep before answering.")
    fail_attempts: list[int] = Field(
        default_factory=list, description="Attempt numbers (1-based) that fail."
    )
    fail_probability: float = Field(0.0, ge=0, le=1, description="Chance an attempt fails.")
    seed: int = Field(0, description="Seed for fail_probability, mixed with the attempt.")
    permanent: bool = Field(False, description="Injected failures are permanent, not transient.")
    hang: bool = Field(False, description="Never answer (until the step timeout cuts it).")


def simulate(sim: Simulation | None, ctx: ToolContext) -> None:
    """Apply ``sim`` to this attempt: sleep, hang, or raise an injected failure."""
    if sim is None:
        return
    if sim.hang:
        time.sleep(10**6)
    if sim.latency_s:
        time.sleep(sim.latency_s)
    unlucky = random.Random(f"{sim.seed}:{ctx.step_id}:{ctx.attempt}").random()
    if ctx.attempt in sim.fail_attempts or unlucky < sim.fail_probability:
        error = PermanentToolError if sim.permanent else TransientToolError
        raise error(f"injected failure on attempt {ctx.attempt}")


ToolFunc = Callable[[Any, ToolContext], Any]


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: its contract and the function that runs it."""

    name: str
    description: str
    params_model: type[BaseModel]
    output_model: type[BaseModel] | None
    func: ToolFunc
    side_effect: SideEffect = "read"
    timeout_s: float | None = None
    compensate: str | None = None
    # Exceptions of the tool that retrying cannot fix, besides PermanentToolError: an attempt
    # that raises one fails for good at once; any other exception is retried (max_retries).
    non_retryable: tuple[type[BaseException], ...] = ()

    def params_schema(self) -> dict[str, Any]:
        """JSON schema of the params, as shown to planners."""
        return self.params_model.model_json_schema()

    def sensitive_fields(self) -> frozenset[str]:
        """Params never shown in prompts, logs or Flower."""
        return _sensitive_fields(self.params_model)

    def param_names(self) -> frozenset[str]:
        """The params the tool declares (with their aliases)."""
        return _param_names(self.params_model)

    def takes_extra_params(self) -> bool:
        """Whether params the tool does not declare are accepted too."""
        return self.params_model.model_config.get("extra") == "allow"

    def params_errors(self, params: Mapping[str, Any]) -> list[ParamError]:
        """Every way ``params`` break the params model (empty when they fit)."""
        try:
            self.params_model.model_validate(dict(params))
        except ValidationError as exc:
            return [(tuple(e["loc"]), e["msg"]) for e in exc.errors(include_url=False)]
        return []

    def non_retryable_names(self) -> list[str]:
        """The ``non_retryable`` classes by name (``ValueError``, ``acme.errors.Gone``), as
        the catalogue publishes them."""
        return [exception_name(cls) for cls in self.non_retryable]

    def run(self, params: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Validate ``params``, run the tool and return its output as JSON-ready data."""
        try:
            parsed = self.params_model.model_validate(dict(params))
        except ValidationError as exc:  # its str() would repeat the values: secrets too
            # permanent: the same params fail the same schema on every attempt
            raise ToolParamsError(self.name, validation_summary(exc)) from None
        result = self.func(parsed, ctx if ctx.tool else replace(ctx, tool=self.name))
        if isinstance(result, BaseModel):
            dumped: dict[str, Any] = result.model_dump(mode="json")
            return dumped
        if self.output_model is not None:
            return self.output_model.model_validate(result).model_dump(mode="json")
        return dict(json.loads(json.dumps(result, default=str)))


class ToolRegistry:
    """Tools by name."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {spec.name: spec for spec in specs}

    def register(self, spec: ToolSpec) -> ToolSpec:
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownToolError(name, list(self._specs)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def names(self) -> list[str]:
        return sorted(self._specs)

    def known_names(self) -> list[str]:
        """Every tool a plan may name (a live view lists fewer in :meth:`names`)."""
        return self.names()

    def specs(self) -> list[ToolSpec]:
        return [self._specs[name] for name in self.names()]

    def subset(self, prefixes: Iterable[str]) -> ToolRegistry:
        """Only the tools whose names start with one of ``prefixes`` (``ecommerce``, ...)."""
        wanted = tuple(f"{p.rstrip('.')}." for p in prefixes)
        return ToolRegistry(s for s in self.specs() if s.name.startswith(wanted))


REGISTRY = ToolRegistry()


def tool(
    name: str,
    *,
    description: str,
    params: type[BaseModel],
    output: type[BaseModel] | None = None,
    side_effect: SideEffect = "read",
    timeout_s: float | None = None,
    compensate: str | None = None,
    non_retryable: Iterable[type[BaseException]] = (),
    registry: ToolRegistry | None = None,
) -> Callable[[ToolFunc], ToolFunc]:
    """Register the decorated function as tool ``name``.

    An exception the tool raises is retried within the step's ``max_retries``, unless it is
    a :class:`PermanentToolError` or an instance of a class in ``non_retryable`` (e.g.
    ``[KeyError, acme.NotFound]``): those fail the step at once.

    Raises:
        TypeError: ``non_retryable`` holds something that is not an exception class.
    """
    declared = tuple(non_retryable)
    for cls in declared:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise TypeError(f"tool {name!r}: non_retryable takes exception classes, not {cls!r}")

    def register(func: ToolFunc) -> ToolFunc:
        (registry or REGISTRY).register(
            ToolSpec(
                name=name,
                description=description,
                params_model=params,
                output_model=output,
                func=func,
                side_effect=side_effect,
                timeout_s=timeout_s,
                compensate=compensate,
                non_retryable=declared,
            )
        )
        return func

    return register


def load_tools(modules: Iterable[str] = ()) -> ToolRegistry:
    """Import every entry-point toolset and ``modules``; return the filled registry.

    Raises:
        ToolModuleError: a module of ``modules`` cannot be imported (it says why).
    """
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        importlib.import_module(ep.value)
    for module in modules:
        import_tool_module(module)
    return REGISTRY


def import_tool_module(module: str) -> None:
    """Import a user's tool module, telling "not found" from "found, but its import failed".

    Raises:
        ToolModuleError: ``missing`` None when ``module`` (or a package above it) is not
            found; the missing name when the module's own import of something failed.
    """
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        gone = exc.name or ""
        if gone and (module == gone or module.startswith(f"{gone}.")):
            raise ToolModuleError(module) from None
        raise ToolModuleError(module, missing=gone or str(exc)) from None
    except ImportError as exc:  # `from x import y` where x has no y
        raise ToolModuleError(module, reason=_one_line(f"ImportError: {exc}")) from None
    except Exception as exc:  # the module's own code failed while it was imported
        raise ToolModuleError(module, reason=_one_line(f"{type(exc).__name__}: {exc}")) from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


@functools.cache  # one params model per tool: built once per process, not once per step
def _param_names(model: type[BaseModel]) -> frozenset[str]:
    names = set(model.model_fields)
    for info in model.model_fields.values():
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
    return frozenset(names)


def exception_name(cls: type[BaseException]) -> str:
    """``ValueError`` for a builtin, ``module.Qualname`` for any other exception class."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


@functools.cache
def _sensitive_fields(params_model: type[BaseModel]) -> frozenset[str]:
    """A params model's sensitive fields, once per model: every dispatch asks (Flower's
    masked preview), and the annotations' text costs tens of microseconds to make."""
    return frozenset(
        name
        for name, info in params_model.model_fields.items()
        if (isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("sensitive"))
        or "Secret" in str(info.annotation)
    )
