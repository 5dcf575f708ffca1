"""Errors of a plan that cannot run: :class:`PlanError` and its subclasses (the tree:
core/errors.py)."""

from __future__ import annotations

from planloop.core.error_base import PlanloopError, public


class PlanError(PlanloopError):
    """A plan that cannot run."""


class PlanLoadError(PlanError):
    """A plan file or document that cannot be read into a plan."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class PlanValidationError(PlanError):
    """A plan that breaks a rule; ``step_id`` names the culprit when there is one."""

    def __init__(self, message: str, *, step_id: str | None = None) -> None:
        self.step_id = step_id
        super().__init__(message)


class PlanReferenceError(PlanError):
    """Step ``step_id``'s params hold ``reference``, which points at no recorded output."""

    def __init__(self, message: str, *, step_id: str, reference: str) -> None:
        self.step_id = step_id
        self.reference = reference
        super().__init__(f"step {step_id!r}: cannot resolve {reference}: {message}")


class RepeatedPlanError(PlanError):
    """A proposed plan (or sub-graph) whose ``fingerprint`` matches one that already failed."""

    def __init__(self, message: str, *, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        super().__init__(message)


class NoLiveWorkerError(PlanError):
    """No live worker on the queue serves ``tools``; ``live`` is each live worker's name with
    the toolsets it serves."""

    def __init__(
        self, tools: list[str], live: dict[str, list[str]], *, waited_s: float = 0
    ) -> None:
        self.tools = tools
        self.live = live
        served = (
            "; ".join(f"{name} ({', '.join(sets) or 'no tools'})" for name, sets in live.items())
            if live
            else "none"
        )
        waited = f" after waiting {waited_s:g}s" if waited_s else ""
        super().__init__(
            f"no live worker serves {', '.join('any tool' if t == '*' else t for t in tools)}"
            f"{waited}; live workers: {served}. Start "
            "a worker whose PLANLOOP_TOOL_MODULES provides it, or submit with "
            "--wait-for-workers[=SECONDS]"
        )


public(
    PlanError,
    PlanLoadError,
    PlanValidationError,
    PlanReferenceError,
    RepeatedPlanError,
    NoLiveWorkerError,
)
