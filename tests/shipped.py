"""The product as a user gets it: the wheel built from this checkout, installed into a fresh
virtualenv outside the checkout. Integration tests start every Planloop process from it.

The test process itself imports ``planloop`` from the developer's editable install (it reads
Redis and SQL to check outcomes); the supervisors, workers, CLI, console and Flower it starts
run :attr:`Shipped.planloop` with :meth:`Shipped.env`, in :attr:`Shipped.home`: no repository
folder on ``sys.path`` or ``PYTHONPATH``, so a module that only works from a checkout (a bare
``planner`` import, a resource read by folder name) fails the suite the way it fails a user.

The virtualenv is built once per content of the checkout's files (sha256 over the files the
wheel is built from) and kept in ``~/.cache/planloop-tests`` (``PLANLOOP_TEST_CACHE``); a
file lock makes parallel test processes build it once. ``PLANLOOP_TEST_SHIPPED_VENV`` names
an existing venv to use instead (its ``planloop`` must be this checkout's wheel).

Test-only tool modules live in ``tests/tool_modules/`` and reach the processes as a user's
own tools do: copied to a folder of their own, which is on ``PYTHONPATH``.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import venv
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from planloop.producer.stack import Stack

ROOT = Path(__file__).resolve().parents[1]
TOOL_MODULES = ROOT / "tests" / "tool_modules"
# The checkout's folders that install as planloop.<folder>: none may be importable by its
# bare name in a shipped process.
BARE_NAMES = (
    "config",
    "console",
    "core",
    "examples",
    "planner",
    "producer",
    "supervisor",
    "workers",
)
# The extras the suite's processes need (PostgreSQL tests, traces).
EXTRAS = "postgres,otel"
SHIPPED_VENV = "PLANLOOP_TEST_SHIPPED_VENV"  # a venv to use as is (set for xdist workers)
KEEP_VENVS = 4  # cached venvs kept whatever their age (parallel checkouts, a branch switch)
STALE_AFTER_S = 3_600  # beyond those, a venv no run used for this long is removed


def checkout_files(root: Path = ROOT) -> list[str]:
    """The checkout's files: what git tracks plus what it does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    names = {n for n in listed.decode().split("\0") if n}
    return sorted(n for n in names if (root / n).is_file())


def wheel_inputs(names: list[str], root: Path = ROOT) -> list[str]:
    """The files of ``names`` the wheel is built from: the project's metadata and the folders
    pyproject maps into the package (tests, benchmarks and docs are not part of it)."""
    config = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    folders = {"planloop", *config["tool"]["setuptools"]["package-dir"].values()}
    return [n for n in names if n in ("pyproject.toml", "README.md") or n.split("/")[0] in folders]


def content_hash(root: Path, names: list[str]) -> str:
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256((root / name).read_bytes()).digest())
    return digest.hexdigest()[:16]


def copy_files(root: Path, names: list[str], target: Path) -> None:
    for name in names:
        dest = target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest)


def build_wheel(source: Path, out: Path) -> Path:
    """The wheel of the tree at ``source`` (pip's isolated build, as a user's ``pip wheel``)."""
    _quietly(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        cwd=out.parent,
    )
    (wheel,) = out.glob("planloop-*.whl")
    return wheel


def install_venv(target: Path, wheel: Path, extras: str = EXTRAS) -> None:
    """A new virtualenv at ``target`` with the wheel (and its dependencies) installed."""
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    spec = f"{wheel}[{extras}]" if extras else str(wheel)
    python = str(target / "bin" / "python")
    _quietly(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", spec], cwd=target
    )


def _quietly(argv: list[str], cwd: Path) -> None:
    """Run a pip command; its chatter is shown only when it fails."""
    done = subprocess.run(
        argv, cwd=cwd, env=clean_env(os.environ), capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")


def clean_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without what would let a process see the checkout or the developer's venv:
    ``PYTHON*`` variables, ``VIRTUAL_ENV``, and ``PATH`` entries inside the checkout."""
    env = {k: v for k, v in base.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    path = [p for p in base.get("PATH", "").split(os.pathsep) if p and not _inside(Path(p), ROOT)]
    env["PATH"] = os.pathsep.join(path)
    return env


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Shipped:
    """The installed product: its venv, the folder processes run in, and test tool modules."""

    venv: Path
    home: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def planloop(self) -> Path:
        return self.bin / "planloop"

    @property
    def tools(self) -> Path:
        """The folder of the test-only tool modules (a user's own tools folder)."""
        return self.home / "tools"

    def cli(self) -> list[str]:
        """The command line that starts ``planloop`` (a subcommand follows)."""
        return [str(self.planloop)]

    def stack(self, env: Mapping[str, str], log_dir: Path) -> Stack:
        """A :class:`Stack` whose processes run from the shipped venv with ``env`` (cleaned)."""
        return Stack(env=self.env(env), log_dir=log_dir, command=self.cli(), cwd=self.home)

    def stack_options(self) -> dict[str, Any]:
        """The keyword arguments that make ``local_stack`` start shipped processes."""
        return {"base_env": self.env(), "command": self.cli(), "cwd": self.home}

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) as a user's shell would have it:
        the venv's ``bin`` first on ``PATH``, nothing of the checkout, and on ``PYTHONPATH``
        the folders ``base`` had there (outside the checkout) and the test tool modules'."""
        given = (os.environ if base is None else base).get("PYTHONPATH", "")
        env = clean_env(os.environ if base is None else base)
        env["PATH"] = os.pathsep.join([str(self.bin), env["PATH"]])
        # a user's own folders stay on the path (never one inside the checkout)
        folders = [p for p in given.split(os.pathsep) if p and not _inside(Path(p), ROOT)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*folders, str(self.tools)]))
        return env


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _remove_stale(
    cache_dir: Path, keep: Path, pattern: str = "shipped-*", kept: int = KEEP_VENVS
) -> None:
    """Remove cached venvs matching ``pattern`` beyond the ``kept`` most recently used that
    no run has used for ``STALE_AFTER_S``: each change of the package's files makes a new
    one (~300 MB; 1.5 GB with the local-embeddings extra)."""
    venvs = sorted(
        (p for p in cache_dir.glob(pattern) if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in venvs[kept - 1 :]:
        if time.time() - old.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)
            old.with_name(f"{old.name}.lock").unlink(missing_ok=True)


def test_cache() -> Path:
    """The folder the suite keeps its venvs in (``PLANLOOP_TEST_CACHE``)."""
    cache_dir = Path(
        os.environ.get("PLANLOOP_TEST_CACHE", Path.home() / ".cache" / "planloop-tests")
    )
    cache_dir.mkdir(parents=True, exist_ok=True)
    return cache_dir


def ensure_venv() -> Path:
    """The shipped venv of this checkout's current content, built if it is not cached yet."""
    given = os.environ.get(SHIPPED_VENV)
    if given:
        return Path(given)
    names = wheel_inputs(checkout_files())
    cache_dir = test_cache()
    target = cache_dir / f"shipped-{content_hash(ROOT, names)}"
    fd = _lock(cache_dir / f"{target.name}.lock")
    try:
        if not (target / "ready").exists():
            shutil.rmtree(target, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix="planloop-wheel-"))
            try:
                copy_files(ROOT, names, work / "src")
                (work / "dist").mkdir()
                wheel = build_wheel(work / "src", work / "dist")
                install_venv(target / "venv", wheel)
                shutil.copy2(wheel, target / wheel.name)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            (target / "ready").write_text(f"built from {ROOT}\n")
        os.utime(target)
        _remove_stale(cache_dir, target)
    finally:
        os.close(fd)
    return target / "venv"


def shipped_wheel(venv_dir: Path) -> Path:
    """The wheel a cached venv was installed from."""
    (wheel,) = venv_dir.parent.glob("planloop-*.whl")
    return wheel


@cache
def shipped() -> Shipped:
    """This test process's view of the shipped product (built on first use)."""
    venv_dir = ensure_venv()
    home = Path(tempfile.mkdtemp(prefix="planloop-user-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    if _inside(home, ROOT):
        raise RuntimeError(f"the shipped processes' folder {home} is inside the checkout {ROOT}")
    shutil.copytree(TOOL_MODULES, home / "tools", ignore=shutil.ignore_patterns("__*"))
    return Shipped(venv=venv_dir, home=home)


if __name__ == "__main__":  # `make test` builds the venv once, before the test processes start
    print(ensure_venv())
