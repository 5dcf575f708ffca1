"""supervisor/ has no import cycles: the graph of its modules' imports, read from the source
(``TYPE_CHECKING`` and function-level imports included), is acyclic."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

SUPERVISOR = Path(__file__).resolve().parents[2] / "supervisor"
PREFIX = "planloop.supervisor."


def imports_of(path: Path) -> set[str]:
    """The supervisor modules ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n.removeprefix(PREFIX) for n in names if n.startswith(PREFIX)}
    return found


def module_name(path: Path) -> str:
    """``session.loop`` for supervisor/session/loop.py: the name under planloop.supervisor."""
    return ".".join(path.relative_to(SUPERVISOR).with_suffix("").parts)


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SUPERVISOR.rglob("*.py") if p.stem != "__init__"}
    return {name: imports_of(path) & set(modules) for name, path in modules.items()}


def test_supervisor_modules_import_each_other_without_a_cycle() -> None:
    try:
        order = list(graphlib.TopologicalSorter(graph()).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle in supervisor/: {' -> '.join(exc.args[1])}") from None
    assert "session.loop" in order


def test_the_check_finds_a_cycle() -> None:
    cyclic = {"a": {"b"}, "b": {"a"}}
    try:
        graphlib.TopologicalSorter(cyclic).prepare()
    except graphlib.CycleError:
        return
    raise AssertionError("a cycle went unnoticed")
