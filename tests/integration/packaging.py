"""Build the wheel from this checkout and install it into a fresh virtualenv, as a user would."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a copy of the checkout to build from leaves out: caches, venvs, local state.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv", ".planloop", "__pycache__", "*.egg-info", "build", "dist", ".*_cache"
)


def build_wheel(workdir: Path) -> Path:
    """The wheel of the working tree (a copy of it, so the checkout gets no build output)."""
    source = workdir / "src"
    shutil.copytree(ROOT, source, ignore=IGNORED, symlinks=True)
    out = workdir / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        check=True,
        timeout=600,
    )
    (wheel,) = out.glob("planloop-*.whl")
    return wheel


def fresh_venv(workdir: Path, wheel: Path) -> Path:
    """A new virtualenv with nothing but the wheel (and its dependencies); its bin dir."""
    target = workdir / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    bin_dir = target / "bin"
    subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
        timeout=900,
    )
    return bin_dir


def installed_top_level(bin_dir: Path) -> set[str]:
    """The top-level import names the installed distribution occupies."""
    code = (
        "import importlib.metadata as m;"
        "d = m.distribution('planloop');"
        "print('\\n'.join(sorted({f.parts[0] for f in d.files or []"
        " if f.parts[0].isidentifier() and not f.parts[0].endswith('.dist-info')})))"
    )
    # isolated (-I): neither the current directory (a checkout's planloop.egg-info) nor
    # PYTHON* variables may stand in for what the venv holds
    out = subprocess.run(
        [str(bin_dir / "python"), "-I", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=bin_dir,
    )
    return set(out.stdout.split())
