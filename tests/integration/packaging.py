"""What the installed distribution holds, what a wheel holds, and what a Docker build context
holds."""

from __future__ import annotations

import hashlib
import re
import subprocess
import zipfile
from pathlib import Path


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


def _pattern(glob: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over a relative path (Go's filepath.Match plus
    ``**`` for any number of folders, as Docker's builder reads it)."""
    out = ""
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif glob[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(out + r"\Z")


def docker_context(names: list[str], dockerignore: str) -> list[str]:
    """The files of ``names`` that a build context with this .dockerignore holds: a file is
    left out when the last pattern matching it, or one of its folders, is not a ``!`` one."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for line in dockerignore.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, _pattern(line.lstrip("!").strip("/"))))

    def excluded(name: str) -> bool:
        parts = name.split("/")
        candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for keep, rule in rules:
            if any(rule.match(c) for c in candidates):
                verdict = not keep
        return verdict

    return [n for n in names if not excluded(n)]


def wheel_contents(wheel: Path) -> dict[str, str]:
    """Each file of a wheel -> the sha256 of its bytes (RECORD, which lists them, left out)."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith(".dist-info/RECORD")
        }
