"""Every module has one import name, ``planloop.<folder>.<module>``: no source of the package
resolves a resource or a module by a bare folder name (ruff's TID251 bans the imports)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ].values()
)
# files("planner"), import_module("core.keys"), find_spec("workers"), resources.files('config')
BY_NAME = re.compile(
    r"""\b(?:files|import_module|find_spec|__import__)\(\s*["'](?P<name>"""
    + "|".join(FOLDERS)
    + r""")(?:\.[\w.]*)?["']"""
)


def offenders(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if BY_NAME.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_source_resolves_a_bare_folder_name() -> None:
    sources = [p for folder in ["planloop", *FOLDERS] for p in (ROOT / folder).rglob("*.py")]
    assert len(sources) > 100
    assert offenders(sources) == []


def test_the_check_can_fail() -> None:
    bad = ROOT / "build" / "one-name-probe.py"
    bad.parent.mkdir(exist_ok=True)
    bad.write_text('text = resources.files("planner").joinpath("prompts")\n')
    try:
        assert offenders([bad]) == [f"build/one-name-probe.py:1: {bad.read_text().strip()}"]
    finally:
        bad.unlink()


def test_the_package_has_no_links_to_the_folders() -> None:
    assert not [p for p in (ROOT / "planloop").iterdir() if p.is_symlink()]
