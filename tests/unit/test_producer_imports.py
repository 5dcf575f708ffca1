"""The core, the SDK and ``planloop submit`` import no Celery, kombu or billiard.

A producer talks to Redis only: loading Celery's side for it costs hundreds of milliseconds
per command (bench/import_time.py prints the figure). A fresh interpreter imports every
``planloop.core`` module (its sub-packages too), the SDK clients and the CLI's submit
command, prints ``submit --help``, and says which of the three it loaded; the second test
shows the probe sees them where they are imported. tests/integration/test_import_graph.py
runs ``planloop submit`` itself from the installed wheel.
"""

from __future__ import annotations

import json
import subprocess
import sys

CELERY_SIDE = ("celery", "kombu", "billiard")
PRODUCER = (
    "planloop.client",
    "planloop.aio",
    "planloop.producer.client",
    "planloop.producer.cli",
    "planloop.producer.cli.submit",
)

PROBE = """
import contextlib, importlib, io, json, pkgutil, sys
import planloop.core
core = sorted(
    m.name for m in pkgutil.walk_packages(planloop.core.__path__, "planloop.core.")
)
for name in [*core, *sys.argv[1:]]:
    importlib.import_module(name)
from planloop.producer.cli import main
with contextlib.redirect_stdout(io.StringIO()) as help_text, contextlib.suppress(SystemExit):
    main(["submit", "--help"])
loaded = [m for m in ("celery", "kombu", "billiard") if m in sys.modules]
print(json.dumps({"core": core, "help": help_text.getvalue(), "loaded": loaded}))
"""


def _probe(*modules: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_the_core_the_sdk_and_submit_load_no_celery_kombu_or_billiard() -> None:
    seen = _probe(*PRODUCER)

    core = seen["core"]
    assert isinstance(core, list)
    assert {"planloop.core.hot_state", "planloop.core.receipts", "planloop.core.seams"} <= set(core)
    assert any(name.startswith("planloop.core.lua.") for name in core)  # sub-packages too
    assert "Usage:" in str(seen["help"])
    assert seen["loaded"] == [], f"the producer's imports loaded {seen['loaded']}"


def test_the_probe_sees_celery_kombu_and_billiard_where_they_are_imported() -> None:
    seen = _probe("planloop.workers.transport")

    assert seen["loaded"] == list(CELERY_SIDE)
