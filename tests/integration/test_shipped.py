"""Every process the suite starts runs the installed wheel, never the checkout.

A module that works only from a checkout (a bare ``planner`` import, a resource read by its
folder name) must fail the suite the way it fails a user after ``pip install``: these tests
fail when a shipped process could import a folder of the repository by its bare name, or
when a process of the suite's stacks runs from the checkout, in it, or with it on its path.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack
from tests.shipped import BARE_NAMES, ROOT, shipped

pytestmark = pytest.mark.integration

PROBE = """
import importlib.util, json, sys
found = {name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]}
try:
    import planloop, planloop.planner.prompting as prompting
    seen = {
        "planloop": planloop.__file__,
        "prompt": prompting.load_template("planner")[0].template.splitlines()[0],
    }
except ImportError as exc:
    seen = {"error": repr(exc)}
print(json.dumps({"bare": found, "path": sys.path, **seen}))
"""


def _inside_checkout(path: str) -> bool:
    return Path(path).resolve().is_relative_to(ROOT)


def test_a_shipped_process_cannot_import_the_checkouts_folders() -> None:
    done = subprocess.run(
        [str(shipped().python), "-c", PROBE, *BARE_NAMES],
        env=shipped().env(),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert not any(seen["bare"].values()), seen["bare"]
    assert Path(seen["planloop"]).is_relative_to(shipped().venv), seen["planloop"]
    assert not [p for p in seen["path"] if p and _inside_checkout(p)], seen["path"]
    assert seen["prompt"] == "ROLE: planner"  # prompts load from planloop.planner


def test_the_probe_can_fail_from_the_checkout() -> None:
    """The same probe with the checkout first on ``sys.path`` (where the old suite put it for
    every process) sees the bare names: the check above is able to fail."""
    from_checkout = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{PROBE}"
    done = subprocess.run(
        [str(shipped().python), "-c", from_checkout, *BARE_NAMES],
        env=shipped().env(),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout)["bare"]["planner"] is True


def _process_view(pid: int) -> tuple[str, str, dict[str, str]]:
    """The executable (argv[0]), working directory and environment of a live process."""
    proc = Path(f"/proc/{pid}")
    # empty for a moment while the kernel completes the exec that Popen already returned from
    argv = wait_for(lambda: (proc / "cmdline").read_bytes(), 10, f"pid {pid}'s argv").split(b"\0")
    raw = (proc / "environ").read_bytes().split(b"\0")
    env = dict(item.decode().partition("=")[::2] for item in raw if b"=" in item)
    return argv[0].decode(), os.readlink(proc / "cwd"), env


def _assert_shipped(stack: Stack) -> None:
    assert stack.processes, "the stack runs no process"
    for proc in stack.processes:
        assert proc.poll() is None, f"pid {proc.pid} exited"
        exe, cwd, env = _process_view(proc.pid)
        assert Path(exe).is_relative_to(shipped().venv), exe
        assert not _inside_checkout(cwd), cwd
        path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        assert not [p for p in path if _inside_checkout(p)], path
        assert "VIRTUAL_ENV" not in env


def test_the_shared_stacks_run_the_shipped_product(stack: Stack, llm_stack: Stack) -> None:
    _assert_shipped(stack)
    _assert_shipped(llm_stack)


def test_private_stacks_run_the_shipped_product(private_stack: MakeStack) -> None:
    _assert_shipped(private_stack(workers=1, supervisors=1).stack)


def test_bundled_examples_run_by_name_from_anywhere(
    stack: Stack, env_overrides: dict[str, str]
) -> None:
    """``planloop submit examples/diamond.yaml`` (the README's line) after ``pip install``, in
    a folder with no examples/: the shipped file is found and says so."""
    assert not (shipped().home / "examples").exists()
    done = subprocess.run(
        [*shipped().cli(), "submit", "examples/diamond.yaml", "--wait"],
        env=shipped().env({**os.environ, **env_overrides}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "using the example shipped with planloop" in done.stderr
    missing = subprocess.run(
        [*shipped().cli(), "submit", "elsewhere/diamond.yaml"],
        env=shipped().env({**os.environ, **env_overrides}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "elsewhere/diamond.yaml" in missing.stderr


def test_planloop_examples_copies_them_out(tmp_path: Path) -> None:
    done = subprocess.run(
        [*shipped().cli(), "examples"],
        env=shipped().env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    copied = sorted(p.name for p in (tmp_path / "examples").iterdir())
    assert copied == [
        "diamond.yaml",
        "ecommerce.yaml",
        "ecommerce_answer.json",
        "producer_script.py",
        "supply_chain.yaml",
    ]
    assert "planloop submit examples/diamond.yaml" in done.stdout
