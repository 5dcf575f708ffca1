"""The root of Planloop's errors, and the two errors directly under it that belong to no
family (the tree: core/errors.py)."""

from __future__ import annotations

# Where users import every error from, and what tracebacks, Celery's exc_module and
# pickles name: the errors are written in family modules, their home stays core/errors.py.
PUBLIC_MODULE = "planloop.core.errors"


class PlanloopError(Exception):
    """Root of every Planloop error."""


class InputLimitError(PlanloopError):
    """Text a person sent (``what``: goal, signal, ...) breaks an input limit."""

    def __init__(self, what: str, problem: str) -> None:
        self.what = what
        super().__init__(f"{what}: {problem}")


class DispatchError(PlanloopError):
    """A step attempt could not be turned into a Celery message."""


def public(*classes: type[BaseException]) -> None:
    """Give ``classes`` the module they are imported from: :data:`PUBLIC_MODULE`."""
    for cls in classes:
        cls.__module__ = PUBLIC_MODULE


public(PlanloopError, InputLimitError, DispatchError)
