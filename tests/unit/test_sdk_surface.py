"""``import planloop``: the public names load, lazily, and the package says it is typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import planloop


def test_every_public_name_resolves() -> None:
    for name in planloop.__all__:
        assert getattr(planloop, name) is not None, name
    assert planloop.Plan.__module__.endswith("planloop.planner.plan")
    assert callable(planloop.tool)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        planloop.Nope  # noqa: B018


def test_importing_the_package_loads_no_client() -> None:
    # every process imports the package first; the client's imports come on first use
    code = "import sys, planloop; print('planloop.client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_package_is_typed() -> None:
    assert (Path(planloop.__file__).parent / "py.typed").is_file()


def test_approve_needs_exactly_one_of_step_and_action() -> None:
    client = planloop.Client.__new__(planloop.Client)  # no Redis needed to refuse
    with pytest.raises(ValueError, match="either step= or action="):
        client.approve("sid")
    with pytest.raises(ValueError, match="either step= or action="):
        client.approve("sid", step="a", action="abort")


def test_the_error_types_a_tool_or_a_caller_needs_are_public() -> None:
    from planloop.core import errors

    assert planloop.TransientToolError is errors.TransientToolError
    assert planloop.PermanentToolError is errors.PermanentToolError
    assert issubclass(planloop.CommandRefusedError, planloop.SessionError)
    assert issubclass(planloop.PermanentToolError, planloop.PlanloopError)
    for name in ("TransientToolError", "PermanentToolError", "CommandRefusedError"):
        assert name in planloop.__all__
        assert name in (errors.__doc__ or ""), f"{name} missing from the tree in core/errors.py"
