"""The cache of shipped venvs (tests/shipped.py) keeps the recent ones and drops the rest."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.shipped import KEEP_VENVS, STALE_AFTER_S, _remove_stale


def test_old_venvs_beyond_the_newest_are_removed_with_their_locks(tmp_path: Path) -> None:
    now = time.time()
    made = []
    for age in range(KEEP_VENVS + 3):  # the newest first; every one older than the limit
        venv = tmp_path / f"shipped-{age}"
        venv.mkdir()
        (tmp_path / f"{venv.name}.lock").touch()
        stamp = now - STALE_AFTER_S - 10 - age
        os.utime(venv, (stamp, stamp))
        made.append(venv)
    in_use = made[-1]  # the one this run uses is kept even though it is the oldest

    _remove_stale(tmp_path, keep=in_use)

    left = sorted(p.name for p in tmp_path.glob("shipped-*") if p.is_dir())
    assert left == sorted([*(v.name for v in made[: KEEP_VENVS - 1]), in_use.name])
    assert not (tmp_path / f"{made[KEEP_VENVS].name}.lock").exists()


def test_recently_used_venvs_are_kept_however_many(tmp_path: Path) -> None:
    for n in range(KEEP_VENVS + 3):
        (tmp_path / f"shipped-{n}").mkdir()
    _remove_stale(tmp_path, keep=tmp_path / "shipped-0")
    assert len(list(tmp_path.glob("shipped-*"))) == KEEP_VENVS + 3
