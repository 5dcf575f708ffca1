"""Run mypy --strict on the ``planloop`` package as it is installed, from the checkout's folders.

The repository keeps its top-level folders (``config/``, ``core/``, ...) that pyproject's
``package-dir`` installs as ``planloop.config``, ``planloop.core``, ... mypy cannot follow that
mapping (nor the import hook of an editable install), so this lays the package out the way
the wheel does, in ``build/typecheck`` (links to the checkout's files, never imported by
anything), runs mypy there, and prints its findings with the checkout's own paths.

Usage: python scripts/typecheck.py [mypy options]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "build" / "typecheck"


def package_dirs() -> dict[str, str]:
    """pyproject's ``package-dir`` mapping: ``planloop.core`` -> ``core``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return dict(config["tool"]["setuptools"]["package-dir"])


def stage() -> dict[str, str]:
    """Lay out ``build/typecheck/planloop``; the staged prefix -> checkout folder map."""
    shutil.rmtree(STAGE, ignore_errors=True)
    package = STAGE / "planloop"
    package.mkdir(parents=True)
    for item in (ROOT / "planloop").iterdir():
        if item.name != "__pycache__":
            (package / item.name).symlink_to(item)
    where = {"planloop/": "planloop/"}
    for name, folder in package_dirs().items():
        sub = name.removeprefix("planloop.")
        (package / sub).symlink_to(ROOT / folder, target_is_directory=True)
        where[f"planloop/{sub}/"] = f"{folder}/"
    return where


def main(argv: list[str]) -> int:
    where = stage()
    config = str(ROOT / "pyproject.toml")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", config, *argv],
        cwd=STAGE,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MYPY_CACHE_DIR": str(ROOT / ".mypy_cache")},
    )
    # longest prefix first: planloop/core/ before planloop/
    prefixes = sorted(where, key=len, reverse=True)
    pattern = re.compile("^(" + "|".join(re.escape(p) for p in prefixes) + ")", re.MULTILINE)
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        stream.write(pattern.sub(lambda m: where[m.group(1)], text))
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
