"""The tree drawn in core/errors.py's docstring is the tree of PlanloopError subclasses.

Every Planloop module is imported, every exception class defined in one is found, and the
drawing is read back: each PlanloopError must appear under its parent, with the module it
lives in when that is not core/errors.py; every other exception class must be named in the
docstring's list of those outside the tree.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

import planloop
from planloop.core import errors
from planloop.core.errors import PlanloopError

PACKAGES = (
    "config",
    "console",
    "core",
    "planner",
    "producer",
    "supervisor",
    "workers",
)
NOT_IMPORTED = {"planloop.examples.producer_script"}  # a script: it submits when imported
# One line of the drawing: the branches, the class name, its module in brackets if any.
LINE = re.compile(r"^ {4}((?:│   |    )*)(?:[├└]── )?([A-Z]\w+)\b(?: +\[([\w.]+)\])?")


def planloop_modules() -> list[ModuleType]:
    names = [m.name for m in pkgutil.iter_modules(planloop.__path__, "planloop.") if not m.ispkg]
    for package in PACKAGES:
        module = importlib.import_module(f"planloop.{package}")
        names.append(module.__name__)
        names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{module.__name__}.")]
    return [importlib.import_module(n) for n in sorted(set(names) - NOT_IMPORTED)]


def drawn_tree() -> dict[str, tuple[str | None, str]]:
    """Each class drawn: (its parent's name, its module)."""
    drawing = (errors.__doc__ or "").split("::", 1)[1].split("\n\n")[1]
    parents: list[str] = []
    tree: dict[str, tuple[str | None, str]] = {}
    for line in drawing.splitlines():
        found = LINE.match(line)
        if found is None or ("── " not in line and tree):  # a description's second line
            continue
        branches, name, module = found.groups()
        depth = len(branches) // 4 + (1 if "── " in line else 0)
        del parents[depth:]
        tree[name] = (parents[-1] if parents else None, module or errors.__name__)
        parents.append(name)
    return tree


def test_every_planloop_error_is_drawn_under_its_parent() -> None:
    modules = planloop_modules()
    defined = {
        obj
        for module in modules
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
    }
    actual = {
        cls.__name__: (
            None if cls is PlanloopError else cls.__bases__[0].__name__,
            cls.__module__,
        )
        for cls in defined
        if issubclass(cls, PlanloopError)
    }

    assert drawn_tree() == actual


def test_every_other_exception_class_is_named_outside_the_tree() -> None:
    outside = " ".join((errors.__doc__ or "").split("Outside the tree", 1)[1].split())
    for module in planloop_modules():
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and not issubclass(obj, PlanloopError)
                and obj.__module__ == module.__name__
            ):
                assert f"``{obj.__name__}`` [{module.__name__}]" in outside, obj


def test_the_reader_sees_nesting_and_modules() -> None:
    tree = drawn_tree()

    assert tree["PlanloopError"] == (None, "planloop.core.errors")
    assert tree["EffectNotRecordedError"] == ("TransientToolError", "planloop.core.errors")
    assert tree["WaitTimeoutError"] == ("PlanloopError", "planloop.client")
    assert tree["LLMBudgetSpentError"][0] == "LLMError"
