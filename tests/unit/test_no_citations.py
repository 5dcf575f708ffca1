"""The package's docstrings and comments explain the code, not the issue or seed it came from.

"issue 12", "#12" or "seed 003" points a reader at a document the repository does not hold:
what it would tell them belongs in the text itself. Every text file the wheel installs is
read (the folders pyproject's ``package-dir`` maps, and ``planloop/``), vendored scripts
left out; CSS is not read for ``#N``, where it is a colour.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = {".py", ".md", ".yaml", ".yml", ".json", ".mako", ".html", ".js", ".css", ".txt"}
SKIPPED = {"vendor", "__pycache__"}
CITATIONS = (
    re.compile(r"\bissues? ?#?\d+", re.IGNORECASE),
    re.compile(r"\bseeds? #?\d{3}\b", re.IGNORECASE),
    re.compile(r"\b(?:deliverable|deliver) \d+\b", re.IGNORECASE),
)
NUMBERED = re.compile(r"(?<![\w&#])#\d{1,5}\b")  # "#12", not "&#12;" nor "#12ab34"


def package_files() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    folders = {"planloop", *config["tool"]["setuptools"]["package-dir"].values()}
    return sorted(
        path
        for folder in folders
        for path in (ROOT / folder).rglob("*")
        if path.suffix in TEXT and path.is_file() and not SKIPPED & set(path.parts)
    )


def citations(path: Path, root: Path = ROOT) -> list[str]:
    """Each line of ``path`` that cites an issue or a seed, as ``file:line: text``."""
    patterns = CITATIONS if path.suffix == ".css" else (*CITATIONS, NUMBERED)
    return [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if any(pattern.search(line) for pattern in patterns)
    ]


def test_no_package_file_cites_an_issue_or_a_seed() -> None:
    files = package_files()
    found = [citation for path in files for citation in citations(path)]

    assert len(files) > 100  # the walk found the package
    assert not found, "say what the cited document explains instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "# the lease is renewed first (issue 12)",
        '"""Batched starts (issue #10, item 2)."""',
        "# seed 003's scope rule",
        "# see #42 for the race",
        "# Deliver 4: seams",
    ],
)
def test_a_citation_is_found(tmp_path: Path, line: str) -> None:
    module = tmp_path / "module.py"
    module.write_text(f"{line}\n")
    (tmp_path / "style.css").write_text(".a { color: #111; }\n")

    assert citations(module, tmp_path) == [f"module.py:1: {line}"]
    assert citations(tmp_path / "style.css", tmp_path) == []
