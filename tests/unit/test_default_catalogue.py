"""The catalogue planners see by default holds the bundled toolsets, not the bench tools."""

from __future__ import annotations

import json
import subprocess
import sys

from planloop.config.settings import Settings
from planloop.core.tools import ENTRY_POINT_GROUP
from planloop.workers.toolsets import BENCH_TOOLS

# A fresh interpreter: this process's registry may hold the bench tools another test imported.
LIST_DEFAULT_TOOLS = """
import json
from planloop.config.settings import Settings
from planloop.core.tools import load_tools
print(json.dumps(sorted(load_tools(Settings().tool_modules).names())))
"""


def test_the_default_catalogue_has_no_bench_tools() -> None:
    env = {"PATH": "/usr/bin:/bin"}  # no PLANLOOP_* variables: the defaults
    out = subprocess.run(
        [sys.executable, "-c", LIST_DEFAULT_TOOLS], env=env, check=True, capture_output=True
    ).stdout
    names = json.loads(out)

    assert BENCH_TOOLS not in Settings().tool_modules
    assert any(name.startswith("ecommerce.") for name in names)
    assert not [name for name in names if name.startswith("bench.")], (ENTRY_POINT_GROUP, names)


def test_adding_the_bench_module_serves_the_bench_tools() -> None:
    env = {"PATH": "/usr/bin:/bin", "PLANLOOP_TOOL_MODULES": json.dumps([BENCH_TOOLS])}
    out = subprocess.run(
        [sys.executable, "-c", LIST_DEFAULT_TOOLS], env=env, check=True, capture_output=True
    ).stdout

    assert {"bench.echo", "bench.sleep", "bench.write"} <= set(json.loads(out))
