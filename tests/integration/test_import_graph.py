"""The core and the producer import no Celery, kombu or billiard, in the shipped venv.

``planloop submit`` (and the SDK, and the console) talk to Redis only; loading Celery,
kombu and billiard for them costs hundreds of milliseconds per command (bench/import_time.py
prints the figure). Here a fresh interpreter of the installed wheel imports every
``planloop.core`` module and runs ``planloop submit`` to its end (refused: no Redis answers
on the port it is given), then says which of the three it loaded.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.shipped import shipped

pytestmark = pytest.mark.integration

CELERY_SIDE = ("celery", "kombu", "billiard")
NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: submit stops at exit 3

PROBE = """
import importlib, json, pkgutil, sys
import planloop.core
core = sorted(m.name for m in pkgutil.iter_modules(planloop.core.__path__, "planloop.core."))
for name in core:
    importlib.import_module(name)
import planloop.client
from planloop.producer.cli import main
try:
    main(["submit", "--no-worker-check", "examples/diamond.yaml"])
except SystemExit as exc:
    code = exc.code
for name in sys.argv[1:]:
    importlib.import_module(name)
loaded = [m for m in ("celery", "kombu", "billiard") if m in sys.modules]
print(json.dumps({"core": core, "code": code, "loaded": loaded}))
"""


def _probe(*also_import: str) -> dict[str, object]:
    done = subprocess.run(
        [str(shipped().python), "-c", PROBE, *also_import],
        env={**shipped().env(), "PLANLOOP_REDIS_URL": NO_REDIS},
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_the_core_and_planloop_submit_load_no_celery_kombu_or_billiard() -> None:
    seen = _probe()

    assert "planloop.core.hot_state" in seen["core"]  # type: ignore[operator]
    assert seen["code"] == 3, "submit did not get as far as connecting to Redis"
    assert seen["loaded"] == [], f"the submit path loaded {seen['loaded']}"


def test_the_probe_sees_kombu_where_it_is_imported() -> None:
    seen = _probe("planloop.workers.transport")

    assert seen["loaded"] == list(CELERY_SIDE)
