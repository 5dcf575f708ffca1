"""The example plans that ship inside the package (``planloop.examples``).

After a plain ``pip install`` there is no ``examples/`` folder beside the user, yet the README
and ``planloop up``'s hints say ``planloop submit examples/diamond.yaml``: :func:`example_path`
finds the shipped file of that name when no such local file exists, and :func:`copy_examples`
(``planloop examples``) copies them out to be read and edited.
"""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

EXAMPLES = Path(str(files("planloop.examples")))
SHIPPED_SUFFIXES = (".yaml", ".json", ".py")


def shipped_examples() -> list[Path]:
    """The shipped example files, by name."""
    return sorted(
        p for p in EXAMPLES.iterdir() if p.suffix in SHIPPED_SUFFIXES and not p.name.startswith("_")
    )


def example_path(path: Path) -> Path:
    """``path``, or the shipped example of that name when ``path`` does not exist and names
    one by itself or under ``examples/`` (a typo elsewhere still reads as a missing file)."""
    if path.exists() or path.is_absolute() or path.parent not in (Path("."), Path("examples")):
        return path
    shipped = EXAMPLES / path.name
    return shipped if shipped.is_file() else path


def copy_examples(target: Path, *, overwrite: bool = False) -> tuple[list[Path], list[Path]]:
    """Copy the shipped examples into ``target`` (created); the files copied and those left
    alone because they exist already (unless ``overwrite``)."""
    target.mkdir(parents=True, exist_ok=True)
    copied: list[Path] = []
    kept: list[Path] = []
    for source in shipped_examples():
        dest = target / source.name
        if dest.exists() and not overwrite:
            kept.append(dest)
            continue
        shutil.copyfile(source, dest)
        copied.append(dest)
    return copied, kept
