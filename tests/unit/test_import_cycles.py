"""No import cycles in ``workers/``: every import counts, at module level or inside a function
(a deferred import only hides a cycle from the interpreter, not from the reader)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path = ROOT) -> str:
    """The import name of ``path``: a folder of the checkout installs as ``planloop.<folder>``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if root == ROOT and parts[0] != "planloop":
        parts.insert(0, "planloop")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The modules of ``known`` that ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    this = module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import mod` imports the module pkg.mod when there is one
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if name in known}
    found.discard(this)
    return found


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    paths = sorted((root / package).rglob("*.py"))
    known = {module_name(path, root) for path in paths}
    return {module_name(path, root): imported_modules(path, known, root) for path in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


@pytest.mark.parametrize("package", ["workers"])
def test_no_import_cycle(package: str) -> None:
    graph = import_graph(package)
    assert len(graph) > 3  # the scan found the package's modules

    cycle = find_cycle(graph)

    assert cycle is None, " -> ".join(cycle or [])


def test_the_scan_sees_a_cycle_through_a_deferred_import(tmp_path: Path) -> None:
    """The check can fail: the shape ``workers/`` had (app <-> tasks, one side in a function)."""
    graph = {
        "planloop.workers.app": {"planloop.workers.tasks"},
        "planloop.workers.tasks": {
            "planloop.workers.app"
        },  # was `from workers.app import executor` in a function
    }
    assert find_cycle(graph) is not None

    tasks = tmp_path / "workers" / "tasks.py"
    tasks.parent.mkdir()
    tasks.write_text("def run() -> None:\n    from planloop.workers.app import executor\n")
    known = {"planloop.workers.app", "planloop.workers.tasks"}
    assert imported_modules(tasks, known, tmp_path) == {"planloop.workers.app"}
