"""The directory of prometheus_client's multiprocess mode (prefork workers).

Kept apart from :mod:`core.metrics`: prometheus_client picks its mode when first imported, so
the directory is set up here, before anything imports it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable


def multiprocess() -> bool:
    """Whether this process counts in multiprocess mode."""
    return bool(os.environ.get(MULTIPROC_ENV))


def prepare_multiprocess_dir(path: str = "") -> str:
    """Make ``path`` (a fresh temporary directory when empty) the multiprocess directory, empty,
    and point ``PROMETHEUS_MULTIPROC_DIR`` at it; the pool's children inherit it. Call before
    :mod:`core.metrics` is imported. Returns the directory."""
    directory = Path(path or tempfile.mkdtemp(prefix="planloop-metrics-"))
    if directory.exists():
        shutil.rmtree(directory)  # a previous run's files would be summed in
    directory.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    return str(directory)
